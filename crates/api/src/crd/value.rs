//! Validating a value against an OpenAPI schema the way kube-openapi's `validate` package
//! does for custom resources: the same checks in the same order, the same messages
//! (`spec.replicas in body must be of type integer: "string"`), the same choice of which
//! failing `anyOf`/`oneOf` branch to report (the one that matched most, by kube-openapi's match
//! counting), and the translation into field errors apiextensions-apiserver makes
//! (`kubeOpenAPIResultToFieldErrors`).
//!
//! Updates ratchet as in Kubernetes v1.32 (`CRDValidationRatcheting`, on by default): errors
//! inside a part of the object that is unchanged from the old object (properties, map values
//! and `x-kubernetes-list-type: map` items correlated by key) are dropped.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::formats;
use super::gofmt::{self, is_int, shown};
use super::goregex;
use crate::field::{go_quote, FieldError};
use crate::patch::gofmt::float;
use crate::schema::{AdditionalProperties, Schema, SchemaId, SchemaRef, Type};

/// Compiled `pattern`s by schema node, or Go's compile error text.
pub(crate) type Patterns = HashMap<SchemaId, Result<Regex, String>>;

/// Which conversion of the schema the validator sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Custom resources: formats apiextensions does not support are dropped, and
    /// `x-kubernetes-int-or-string` makes the type `integer,string`.
    CustomResource,
    /// Default values in a CRD schema (`Structural.ToKubeOpenAPI`): formats kept as written,
    /// int-or-string only through its `anyOf`.
    Default,
}

/// kube-openapi's error codes that the field error translation distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProperties,
    Other,
}

/// One kube-openapi error.
#[derive(Debug, Clone)]
enum VError {
    /// An `errors.Validation`: where (`Name`), the offending value and the message.
    Validation {
        code: Code,
        name: String,
        value: Option<Value>,
        /// Enum alternatives (for `EnumFailCode`).
        values: Vec<Value>,
        /// The limit (for `TooLong`, `MaxItems`, `TooManyProperties`).
        valid: i64,
        message: String,
    },
    /// Any other error (the composite `anyOf`/`oneOf`/`allOf`/`not` ones).
    Other(String),
}

impl VError {
    fn message(&self) -> &str {
        match self {
            VError::Validation { message, .. } => message,
            VError::Other(m) => m,
        }
    }
}

/// kube-openapi's `Result`: errors (deduplicated by message) and the match count used to pick
/// the best failing alternative of `anyOf`/`oneOf`.
#[derive(Debug, Default, Clone)]
pub(crate) struct VResult {
    errors: Vec<VError>,
    matches: u32,
}

impl VResult {
    fn add(&mut self, e: VError) {
        if !self.errors.iter().any(|x| x.message() == e.message()) {
            self.errors.push(e);
        }
    }

    fn merge(&mut self, other: VResult) {
        for e in other.errors {
            self.add(e);
        }
        self.matches += other.matches;
    }

    fn inc(&mut self) {
        self.matches += 1;
    }

    fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }

    /// A result holding one error and no matches (`errorHelp.sErr`).
    fn err(e: VError) -> VResult {
        VResult {
            errors: vec![e],
            matches: 0,
        }
    }

    /// Drop the errors, keeping the match count (ratcheting turns them into warnings).
    fn ratchet(&mut self) {
        self.errors.clear();
    }

    /// The field errors Kubernetes reports for these errors, under `base` (`None` is Go's nil
    /// path, printed `<nil>`).
    pub(crate) fn field_errors(&self, base: Option<&str>) -> Vec<FieldError> {
        self.errors
            .iter()
            .map(|e| to_field_error(base, e))
            .collect()
    }
}

fn to_field_error(base: Option<&str>, e: &VError) -> FieldError {
    let nil = "<nil>";
    match e {
        VError::Other(message) => FieldError::invalid_shown(base.unwrap_or(nil), "\"\"", message),
        VError::Validation {
            code,
            name,
            value,
            values,
            valid,
            message,
        } => {
            let trimmed = name.strip_prefix('.').unwrap_or(name);
            let path = if name.is_empty() || name == "." {
                base.unwrap_or(nil).to_string()
            } else {
                match base {
                    Some(b) if !b.is_empty() => format!("{b}.{trimmed}"),
                    _ => trimmed.to_string(),
                }
            };
            let value_shown = value.as_ref().map_or_else(|| "\"\"".to_string(), shown);
            match code {
                Code::Required => FieldError::required(path, ""),
                Code::Enum => {
                    let supported: Vec<String> = values
                        .iter()
                        .map(|v| match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .collect();
                    let refs: Vec<&str> = supported.iter().map(String::as_str).collect();
                    FieldError::not_supported_shown(path, &value_shown, &refs)
                }
                Code::TooLong => FieldError::too_long(path, (*valid).max(0) as usize),
                Code::MaxItems | Code::TooManyProperties => {
                    let actual = value.as_ref().and_then(Value::as_i64).unwrap_or(-1);
                    FieldError::too_many(path, actual.max(0) as usize, (*valid).max(0) as usize)
                }
                Code::InvalidType => FieldError {
                    message: format!("{path}: Invalid value: {value_shown}: {message}"),
                    field: path,
                    reason: "FieldValueTypeInvalid",
                },
                Code::Other => FieldError::invalid_shown(path, &value_shown, message),
            }
        }
    }
}

/// An old value correlated with the new value at the same place, with the schema node the
/// correlation follows (the structural schema's main chain, not `allOf` branches).
#[derive(Clone, Copy)]
pub(crate) struct Corr<'v, 's> {
    pub old: &'v Value,
    pub schema: SchemaRef<'s>,
}

/// The validator: a schema arena's compiled patterns and the conversion mode.
pub(crate) struct Validator<'p> {
    pub patterns: &'p Patterns,
    pub mode: Mode,
}

const IN: &str = "body";

fn validation(code: Code, name: &str, value: Option<Value>, message: String) -> VError {
    VError::Validation {
        code,
        name: name.to_string(),
        value,
        values: Vec::new(),
        valid: 0,
        message,
    }
}

/// `errors.InvalidType`: with the data quoted when it is a string (it always is here).
fn invalid_type(name: &str, type_name: &str, data: &str) -> VError {
    validation(
        Code::InvalidType,
        name,
        Some(Value::String(data.to_string())),
        format!(
            "{name} in {IN} must be of type {type_name}: {}",
            go_quote(data)
        ),
    )
}

/// The JSON type kube-openapi derives for a decoded value, and its format.
fn schema_info(data: &Value) -> (&'static str, &'static str) {
    match data {
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if is_int(n) => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
        Value::Null => ("", ""),
    }
}

/// swag's `IsFloat64AJSONInteger`: integral within ±(2^53-1), allowing a relative error of 1e-9.
pub(crate) fn is_float_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    if f == f.trunc() {
        return true;
    }
    if f < 0.0 {
        // Go's uint64 conversion of a negative float wraps far away from f.
        return false;
    }
    let g = f.trunc();
    let diff = (f - g).abs();
    // Go compares with math.SmallestNonzeroFloat64, the smallest subnormal.
    let smallest = f64::from_bits(1);
    if g == 0.0 || diff < smallest {
        return diff < 1e-9 * smallest;
    }
    diff / (f + g).min(f64::MAX) < 1e-9
}

impl Validator<'_> {
    /// The node's `type` list as the validator sees it.
    fn types(&self, s: &Schema) -> Vec<&'static str> {
        if self.mode == Mode::CustomResource && s.int_or_string {
            return vec!["integer", "string"];
        }
        s.ty.map(|t| vec![t.as_str()]).unwrap_or_default()
    }

    /// The node's `format` as the validator sees it.
    fn format<'s>(&self, s: &'s Schema) -> &'s str {
        let f = s.format.as_deref().unwrap_or("");
        if self.mode == Mode::CustomResource && !formats::is_known(f) {
            return "";
        }
        f
    }

    /// Validate `data` at `root` (the path of the root is ""), ratcheting against `old`.
    pub(crate) fn validate_root(
        &self,
        root: SchemaRef<'_>,
        data: &Value,
        old: Option<&Value>,
    ) -> VResult {
        match old {
            Some(old) => self.ratcheting(root, data, "", Corr { old, schema: root }),
            None => self.validate(root, data, "", None),
        }
    }

    /// A correlated node: its errors are dropped when the value did not change.
    fn ratcheting(
        &self,
        s: SchemaRef<'_>,
        data: &Value,
        path: &str,
        corr: Corr<'_, '_>,
    ) -> VResult {
        let mut r = self.validate(s, data, path, Some(corr));
        if !r.is_valid() && deep_equal(data, corr) {
            r.ratchet();
        }
        r
    }

    /// kube-openapi's `SchemaValidator.Validate`.
    fn validate(
        &self,
        s: SchemaRef<'_>,
        data: &Value,
        path: &str,
        corr: Option<Corr<'_, '_>>,
    ) -> VResult {
        let node = s.schema();
        let mut result = VResult::default();
        if data.is_null() {
            result.merge(self.check_type(node, data, path));
            result.merge(self.check_enum(node, data, path));
            return result;
        }
        let types = self.types(node);
        let format = self.format(node);
        if !types.is_empty() || !format.is_empty() {
            result.merge(self.check_type(node, data, path));
            result.inc();
        }
        result.merge(self.check_props(s, data, path));
        result.inc();
        if let Value::String(text) = data {
            result.merge(self.check_string(s, text, path));
            result.inc();
            if formats::is_known(format) {
                if !formats::validates(format, text) {
                    result.merge(VResult::err(invalid_type(path, format, text)));
                }
                result.inc();
            }
        }
        if let Value::Number(_) = data {
            result.merge(self.check_number(node, data, path));
            result.inc();
        }
        if let Value::Array(items) = data {
            result.merge(self.check_slice(s, items, path, corr));
            result.inc();
        }
        result.merge(self.check_enum(node, data, path));
        result.inc();
        if let Value::Object(map) = data {
            result.merge(self.check_object(s, map, path, corr));
            result.inc();
        }
        result.inc();
        result
    }

    /// `typeValidator`.
    fn check_type(&self, s: &Schema, data: &Value, path: &str) -> VResult {
        let types = self.types(s);
        let format = self.format(s);
        let ok = VResult {
            errors: Vec::new(),
            matches: 1,
        };
        if data.is_null() {
            if !types.is_empty() && !types.contains(&"null") && !s.nullable {
                return VResult::err(invalid_type(path, &types.join(","), "null"));
            }
            return ok;
        }
        let (sch_type, sch_format) = schema_info(data);
        let is_float_int = sch_type == "number"
            && data.as_f64().is_some_and(is_float_json_integer)
            && types.contains(&"integer");
        let is_int_float = sch_type == "integer" && types.contains(&"number");
        let stringish = matches!(data, Value::String(_) | Value::Array(_));
        let type_ok =
            types.contains(&sch_type) || sch_format == format || is_float_int || is_int_float;
        if !(stringish || format.is_empty() || type_ok) {
            return VResult::err(invalid_type(path, format, sch_format));
        }
        let numeric = types.contains(&"number") || types.contains(&"integer");
        if stringish && !numeric && !format.is_empty() {
            return ok;
        }
        if !(types.contains(&sch_type) || is_float_int || is_int_float) {
            return VResult::err(invalid_type(path, &types.join(","), sch_type));
        }
        ok
    }

    /// `schemaPropsValidator`: anyOf, oneOf, allOf and not. The alternatives are validated at
    /// the same path without ratcheting (kube-openapi does not pass the options down).
    fn check_props(&self, s: SchemaRef<'_>, data: &Value, path: &str) -> VResult {
        let node = s.schema();
        let set = s.schemas();
        let mut main = VResult::default();
        if !node.any_of.is_empty() {
            let mut best: Option<VResult> = None;
            let mut first_success: Option<VResult> = None;
            let mut succeeded = false;
            for id in &node.any_of {
                let r = self.validate(set.get(*id), data, path, None);
                if r.is_valid() {
                    best = None;
                    succeeded = true;
                    first_success.get_or_insert(r);
                    break;
                }
                if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if !succeeded {
                main.add(VError::Other(format!(
                    "{} must validate at least one schema (anyOf)",
                    go_quote(path)
                )));
            }
            if let Some(b) = best.or(first_success) {
                main.merge(b);
            }
        }
        if !node.one_of.is_empty() {
            let mut best: Option<VResult> = None;
            let mut first_success: Option<VResult> = None;
            let mut validated = 0;
            for id in &node.one_of {
                let r = self.validate(set.get(*id), data, path, None);
                if r.is_valid() {
                    validated += 1;
                    best = None;
                    first_success.get_or_insert(r);
                    continue;
                }
                if validated == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if validated != 1 {
                let detail = if validated == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                main.add(VError::Other(format!(
                    "{} must validate one and only one schema (oneOf). {detail}",
                    go_quote(path)
                )));
                if let Some(b) = best {
                    main.merge(b);
                }
            } else if let Some(first) = first_success {
                main.merge(first);
            }
        }
        if !node.all_of.is_empty() {
            let mut validated = 0;
            for id in &node.all_of {
                let r = self.validate(set.get(*id), data, path, None);
                if r.is_valid() {
                    validated += 1;
                }
                main.merge(r);
            }
            if validated != node.all_of.len() {
                let detail = if validated == 0 {
                    ". None validated"
                } else {
                    ""
                };
                main.add(VError::Other(format!(
                    "{} must validate all the schemas (allOf){detail}",
                    go_quote(path)
                )));
            }
        }
        if let Some(not) = node.not {
            if self.validate(set.get(not), data, path, None).is_valid() {
                main.add(VError::Other(format!(
                    "{} must not validate the schema (not)",
                    go_quote(path)
                )));
            }
        }
        main.inc();
        main
    }

    /// `stringValidator`: maxLength, minLength, pattern; the first failure only.
    fn check_string(&self, s: SchemaRef<'_>, text: &str, path: &str) -> VResult {
        let Some(v) = s.schema().validation.as_deref() else {
            return VResult::default();
        };
        let len = text.chars().count() as u64;
        let data = || Some(Value::String(text.to_string()));
        if let Some(max) = v.max_length {
            if len > max {
                return VResult::err(VError::Validation {
                    code: Code::TooLong,
                    name: path.to_string(),
                    value: data(),
                    values: Vec::new(),
                    valid: max as i64,
                    message: format!("{path} in {IN} should be at most {max} chars long"),
                });
            }
        }
        if let Some(min) = v.min_length {
            if len < min {
                return VResult::err(validation(
                    Code::Other,
                    path,
                    data(),
                    format!("{path} in {IN} should be at least {min} chars long"),
                ));
            }
        }
        if let Some(pattern) = v.pattern.as_deref().filter(|p| !p.is_empty()) {
            let compiled;
            let re = match self.patterns.get(&s.id()) {
                Some(r) => r,
                None => {
                    compiled = goregex::compile(pattern);
                    &compiled
                }
            };
            let failed = match re {
                Ok(re) => (!re.is_match(text)).then(|| pattern.to_string()),
                Err(e) => Some(format!("{pattern}, but pattern is invalid: {e}")),
            };
            if let Some(shown_pattern) = failed {
                return VResult::err(validation(
                    Code::Other,
                    path,
                    data(),
                    format!("{path} in {IN} should match '{shown_pattern}'"),
                ));
            }
        }
        VResult::default()
    }

    /// `numberValidator`: multipleOf, minimum, maximum (reported in that order).
    fn check_number(&self, s: &Schema, data: &Value, path: &str) -> VResult {
        let mut res = VResult::default();
        let Some(v) = s.validation.as_deref() else {
            res.inc();
            return res;
        };
        let Value::Number(n) = data else {
            return res;
        };
        let int = n.as_i64().filter(|_| is_int(n));
        let f = n.as_f64().unwrap_or(0.0);
        let value = || Some(data.clone());
        if let Some(factor) = v.multiple_of {
            match int {
                Some(i) => {
                    let fi = factor as i64;
                    if fi <= 0 {
                        res.add(validation(
                            Code::Other,
                            path,
                            Some(Value::from(fi)),
                            format!("factor MultipleOf declared for {path} must be positive: {fi}"),
                        ));
                    } else if (i / fi) * fi != i {
                        res.add(validation(
                            Code::Other,
                            path,
                            value(),
                            format!("{path} in {IN} should be a multiple of {fi}"),
                        ));
                    }
                }
                None => {
                    if factor <= 0.0 {
                        res.add(validation(
                            Code::Other,
                            path,
                            Some(Value::from(factor)),
                            format!(
                                "factor MultipleOf declared for {path} must be positive: {}",
                                float(factor)
                            ),
                        ));
                    } else {
                        let mult = if factor < 1.0 {
                            1.0 / factor * f
                        } else {
                            f / factor
                        };
                        if !is_float_json_integer(mult) {
                            res.add(validation(
                                Code::Other,
                                path,
                                value(),
                                format!("{path} in {IN} should be a multiple of {}", float(factor)),
                            ));
                        }
                    }
                }
            }
        }
        if let Some(min) = v.minimum {
            let ex = v.exclusive_minimum;
            let (fails, shown_min) = match int {
                Some(i) => {
                    let m = min as i64;
                    ((!ex && i < m) || (ex && i <= m), m.to_string())
                }
                None => ((!ex && f < min) || (ex && f <= min), float(min)),
            };
            if fails {
                let op = if ex {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                res.add(validation(
                    Code::Other,
                    path,
                    value(),
                    format!("{path} in {IN} should be {op} {shown_min}"),
                ));
            }
        }
        if let Some(max) = v.maximum {
            let ex = v.exclusive_maximum;
            let (fails, shown_max) = match int {
                Some(i) => {
                    let m = max as i64;
                    ((!ex && i > m) || (ex && i >= m), m.to_string())
                }
                None => ((!ex && f > max) || (ex && f >= max), float(max)),
            };
            if fails {
                let op = if ex {
                    "less than"
                } else {
                    "less than or equal to"
                };
                res.add(validation(
                    Code::Other,
                    path,
                    value(),
                    format!("{path} in {IN} should be {op} {shown_max}"),
                ));
            }
        }
        res.inc();
        res
    }

    /// `schemaSliceValidator`: items, then minItems, maxItems, uniqueItems.
    fn check_slice(
        &self,
        s: SchemaRef<'_>,
        items: &[Value],
        path: &str,
        corr: Option<Corr<'_, '_>>,
    ) -> VResult {
        let mut result = VResult::default();
        if let Some(item_schema) = s.items() {
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                let r = match corr.and_then(|c| index_corr(c, items, i)) {
                    Some(child) => self.ratcheting(item_schema, item, &item_path, child),
                    None => self.validate(item_schema, item, &item_path, None),
                };
                result.merge(r);
            }
        }
        let size = items.len() as i64;
        if let Some(v) = s.schema().validation.as_deref() {
            if let Some(min) = v.min_items {
                if size < min as i64 {
                    result.add(validation(
                        Code::Other,
                        path,
                        Some(Value::from(size)),
                        format!("{path} in {IN} should have at least {min} items"),
                    ));
                }
            }
            if let Some(max) = v.max_items {
                if size > max as i64 {
                    result.add(VError::Validation {
                        code: Code::MaxItems,
                        name: path.to_string(),
                        value: Some(Value::from(size)),
                        values: Vec::new(),
                        valid: max as i64,
                        message: format!("{path} in {IN} should have at most {max} items"),
                    });
                }
            }
            if v.unique_items {
                let dup = items
                    .iter()
                    .enumerate()
                    .any(|(i, a)| items[..i].iter().any(|b| a == b));
                if dup {
                    result.add(validation(
                        Code::Other,
                        path,
                        None,
                        format!("{path} in {IN} shouldn't contain duplicates"),
                    ));
                }
            }
        }
        result.inc();
        result
    }

    /// `basicCommonValidator`: enum, with Go's conversions between value types.
    fn check_enum(&self, s: &Schema, data: &Value, path: &str) -> VResult {
        if s.enum_values.is_empty() || s.enum_values.iter().any(|e| enum_matches(data, e)) {
            return VResult::default();
        }
        VResult::err(VError::Validation {
            code: Code::Enum,
            name: path.to_string(),
            value: Some(data.clone()),
            values: s.enum_values.clone(),
            valid: 0,
            message: format!(
                "{path} in {IN} should be one of {}",
                gofmt::v(&Value::Array(s.enum_values.clone()))
            ),
        })
    }

    /// `objectValidator`: min/maxProperties, additionalProperties, properties, required.
    fn check_object(
        &self,
        s: SchemaRef<'_>,
        map: &Map<String, Value>,
        path: &str,
        corr: Option<Corr<'_, '_>>,
    ) -> VResult {
        let node = s.schema();
        let set = s.schemas();
        let mut res = VResult::default();
        let n = map.len() as i64;
        if let Some(v) = node.validation.as_deref() {
            if let Some(min) = v.min_properties {
                if n < min as i64 {
                    res.add(validation(
                        Code::Other,
                        path,
                        Some(Value::from(n)),
                        format!("{path} in {IN} should have at least {min} properties"),
                    ));
                }
            }
            if let Some(max) = v.max_properties {
                if n > max as i64 {
                    res.add(VError::Validation {
                        code: Code::TooManyProperties,
                        name: path.to_string(),
                        value: Some(Value::from(n)),
                        values: Vec::new(),
                        valid: max as i64,
                        message: format!("{path} in {IN} should have at most {max} properties"),
                    });
                }
            }
        }
        match node.additional_properties {
            AdditionalProperties::Forbidden => {
                for key in map.keys() {
                    if !node.properties.contains(key) {
                        res.add(validation(
                            Code::Other,
                            path,
                            Some(Value::String(key.clone())),
                            format!("{path}.{key} in {IN} is a forbidden property"),
                        ));
                    }
                }
            }
            AdditionalProperties::Schema(id) => {
                for (key, value) in map {
                    if node.properties.contains(key) {
                        continue;
                    }
                    let child_path = format!("{path}.{key}");
                    res.merge(self.field(set.get(id), key, value, &child_path, path, corr));
                }
            }
            AdditionalProperties::Any | AdditionalProperties::Unspecified => {}
        }
        for (key, value) in map {
            let Some(id) = node.properties.get(key) else {
                continue;
            };
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            res.merge(self.field(set.get(id), key, value, &child_path, path, corr));
        }
        for key in &node.required {
            if !map.contains_key(&**key) {
                res.add(validation(
                    Code::Required,
                    &format!("{path}.{key}"),
                    None,
                    format!("{path}.{key} in {IN} is required"),
                ));
            }
        }
        res
    }

    /// A property or map value, ratcheted when it correlates with the old object.
    fn field(
        &self,
        s: SchemaRef<'_>,
        key: &str,
        value: &Value,
        child_path: &str,
        parent_path: &str,
        corr: Option<Corr<'_, '_>>,
    ) -> VResult {
        let type_meta = parent_path.is_empty() && (key == "kind" || key == "apiVersion");
        match corr.filter(|_| !type_meta).and_then(|c| key_corr(c, key)) {
            Some(child) => self.ratcheting(s, value, child_path, child),
            None => self.validate(s, value, child_path, None),
        }
    }
}

/// Go's enum comparison: deep equality, or equality after converting the value to the enum
/// value's type when Go allows the conversion (numbers between int64 and float64, integers to
/// strings as code points).
fn enum_matches(data: &Value, e: &Value) -> bool {
    if data.is_null() || e.is_null() {
        return false;
    }
    if data == e {
        return true;
    }
    match (data, e) {
        (Value::Number(d), Value::Number(en)) => {
            if is_int(en) {
                let d = match d.as_i64().filter(|_| is_int(d)) {
                    Some(i) => i,
                    None => d.as_f64().unwrap_or(0.0).trunc() as i64,
                };
                Some(d) == en.as_i64()
            } else {
                d.as_f64() == en.as_f64()
            }
        }
        (Value::Number(d), Value::String(s)) if is_int(d) => {
            let c = d
                .as_i64()
                .and_then(|i| u32::try_from(i).ok())
                .and_then(char::from_u32)
                .unwrap_or('\u{fffd}');
            s.chars().eq(std::iter::once(c))
        }
        _ => false,
    }
}

/// `CorrelatedObject.Key`: the old value of a property or map value, when both objects have
/// it and the schema describes it.
fn key_corr<'v, 's>(c: Corr<'v, 's>, key: &str) -> Option<Corr<'v, 's>> {
    let old = c.old.as_object()?.get(key)?;
    let schema = c
        .schema
        .property(key)
        .or_else(|| c.schema.additional_properties())?;
    Some(Corr { old, schema })
}

/// `CorrelatedObject.Index`: for `x-kubernetes-list-type: map` lists, the old item with the
/// same key values.
fn index_corr<'v, 's>(c: Corr<'v, 's>, new: &[Value], i: usize) -> Option<Corr<'v, 's>> {
    let old_list = c.old.as_array()?;
    let s = c.schema.schema();
    if s.list_type.as_deref() != Some("map")
        || s.ty != Some(Type::Array)
        || s.list_map_keys.is_empty()
    {
        return None;
    }
    let key = composite_key(s, new.get(i)?)?;
    let old = old_list
        .iter()
        .find(|o| composite_key(s, o).as_ref() == Some(&key))?;
    let schema = c.schema.items()?;
    Some(Corr { old, schema })
}

/// The key values of a map-list item (all scalars), or `None` when one is missing.
fn composite_key(s: &Schema, item: &Value) -> Option<Vec<Value>> {
    let obj = item.as_object()?;
    s.list_map_keys
        .iter()
        .map(|k| {
            let v = obj.get(&**k)?;
            matches!(v, Value::Bool(_) | Value::Number(_) | Value::String(_)).then(|| v.clone())
        })
        .collect()
}

/// `CorrelatedObject.CachedDeepEqual`: lists compare item by item through the map-list
/// correlation (atomic lists as a whole), objects key by key through the schema.
fn deep_equal(new: &Value, c: Corr<'_, '_>) -> bool {
    match (new, c.old) {
        (Value::Null, Value::Null) => true,
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Array(n), Value::Array(o)) => {
            if n.len() != o.len() {
                return false;
            }
            let s = c.schema.schema();
            let map_list = s.list_type.as_deref() == Some("map");
            for i in 0..n.len() {
                match index_corr(c, n, i) {
                    Some(child) => {
                        if !deep_equal(&n[i], child) {
                            return false;
                        }
                    }
                    None => return !map_list && n == o,
                }
            }
            true
        }
        (Value::Object(n), Value::Object(o)) => {
            if n.len() != o.len() {
                return false;
            }
            n.iter()
                .all(|(k, v)| key_corr(c, k).is_some_and(|child| deep_equal(v, child)))
        }
        (Value::Array(_), _)
        | (_, Value::Array(_))
        | (Value::Object(_), _)
        | (_, Value::Object(_)) => false,
        (a, b) => a == b,
    }
}
