//! The strategies of CustomResourceDefinitions and of custom objects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use capstan_api::catalogue::ResourceInfo;
use capstan_api::crd::CompiledVersion;
use capstan_api::table::IncludeObject;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, FieldError};
use crate::registry::strategy::copy_field;
use crate::registry::Strategy;
use crate::scale::ScalePaths;
use capstan_api::meta::At as _;

/// CustomResourceDefinitions: apiextensions defaults and validation, a status that only the
/// status subresource changes, and the storage version recorded in `status.storedVersions`.
pub struct CrdStrategy(pub &'static ResourceInfo);

impl Strategy for CrdStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.0
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        let stored: Vec<Value> = storage_version(obj)
            .into_iter()
            .map(Value::String)
            .collect();
        if let Some(map) = obj.as_object_mut() {
            map.insert(
                "status".into(),
                json!({
                    "conditions": [],
                    "acceptedNames": {"plural": "", "kind": ""},
                    "storedVersions": stored,
                }),
            );
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "status");
        // A new storage version is recorded among the versions objects may be stored in.
        if let Some(v) = storage_version(new) {
            let status = new
                .as_object_mut()
                .map(|m| m.entry("status").or_insert_with(|| json!({})));
            if let Some(Value::Object(st)) = status {
                let list = st
                    .entry("storedVersions")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    if !a.iter().any(|x| x.as_str() == Some(v.as_str())) {
                        a.push(Value::String(v));
                    }
                }
            }
        }
    }

    fn extra_defaults(&self, obj: &mut Value) {
        capstan_api::crd::default_crd(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        capstan_api::crd::validate_crd(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        capstan_api::crd::validate_crd_update(new, old)
    }

    fn validate_status_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        capstan_api::crd::validate_crd_status_update(new, old)
    }
}

/// The name of the version marked `storage: true`.
fn storage_version(crd: &Value) -> Option<String> {
    crd.at("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))?
        .get("name")?
        .as_str()
        .map(String::from)
}

/// Custom objects of one served version: the definition's schema prunes, defaults and
/// validates them; `metadata.generation` counts changes to anything but metadata (and
/// status, when it is a subresource).
pub struct CustomStrategy {
    info: &'static ResourceInfo,
    version: CompiledVersion,
    terminating: Arc<AtomicBool>,
    scale: Option<ScalePaths>,
}

impl CustomStrategy {
    pub fn new(
        crd: &Value,
        info: &'static ResourceInfo,
        terminating: Arc<AtomicBool>,
    ) -> Result<Self, String> {
        let scale = crd
            .at("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter()
                    .find(|v| v.get("name").and_then(Value::as_str) == Some(info.version))
            })
            .and_then(|v| v.at("/subresources/scale"))
            .or_else(|| crd.at("/spec/subresources/scale"))
            .map(|s| {
                let p = |k: &str| s.get(k).and_then(Value::as_str).map(String::from);
                ScalePaths {
                    spec_replicas: p("specReplicasPath").unwrap_or_default(),
                    status_replicas: p("statusReplicasPath").unwrap_or_default(),
                    label_selector: p("labelSelectorPath"),
                }
            });
        Ok(CustomStrategy {
            info,
            version: CompiledVersion::compile(crd, info.version)?,
            terminating,
            scale,
        })
    }

    pub fn version(&self) -> &CompiledVersion {
        &self.version
    }

    /// The object without metadata (and status when it is a subresource).
    fn content(&self, obj: &Value) -> Map<String, Value> {
        let mut m = obj.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        if self.has_status() {
            m.remove("status");
        }
        m
    }
}

impl Strategy for CustomStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn generation_changes(&self, old: &Value, new: &Value) -> bool {
        self.content(old) != self.content(new)
    }

    fn has_status(&self) -> bool {
        self.info.has_subresource("status")
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if self.has_status() {
            if let Some(map) = obj.as_object_mut() {
                map.remove("status");
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.has_status() {
            copy_field(new, old, "status");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        self.version.validate(obj, None)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        self.version.validate(new, Some(old))
    }

    fn validate_status_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        self.version.validate_status(new, old)
    }

    fn allow_create_on_update(&self) -> bool {
        false
    }

    fn extra_defaults(&self, obj: &mut Value) {
        self.version.default(obj);
    }

    fn check_fields(&self, obj: &mut Value) -> Option<(Vec<String>, Vec<String>)> {
        let decode: Vec<String> = self.version.decode_error(obj).into_iter().collect();
        if !decode.is_empty() {
            return Some((decode, Vec::new()));
        }
        Some((Vec::new(), self.version.prune(obj)))
    }

    fn table(
        &self,
        objects: &[&Value],
        include: IncludeObject,
        list_meta: &Value,
    ) -> Option<Value> {
        Some(custom_table(&self.version, objects, include, list_meta))
    }

    fn schema(&self) -> Option<capstan_api::schema::SchemaRef<'_>> {
        Some(self.version.schema())
    }

    fn scale_paths(&self) -> Option<ScalePaths> {
        self.scale.clone()
    }

    fn refuse_create(&self) -> Option<ApiError> {
        self.terminating.load(Ordering::Relaxed).then(|| {
            ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            )
        })
    }
}

/// A Table of custom objects: Name, then the definition's printer columns.
fn custom_table(
    version: &CompiledVersion,
    objects: &[&Value],
    include: IncludeObject,
    list_meta: &Value,
) -> Value {
    let defs: Vec<Value> = version
        .columns()
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority,
            })
        })
        .collect();
    let now = std::time::SystemTime::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells = version.cells(obj, now);
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
                IncludeObject::Object => (*obj).clone(),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}
