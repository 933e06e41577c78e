//! CustomResourceDefinitions, as Kubernetes v1.32's apiextensions-apiserver handles them: the
//! pure parts. [`default_crd`] and [`validate_crd`]/[`validate_crd_update`] for the CRD objects
//! themselves (with Kubernetes' field paths and messages, structural-schema rules included),
//! [`accepted_names`] for the naming controller's decision, and [`CompiledVersion`] for
//! serving one version of a CRD's custom resources: pruning, defaulting, validation (OpenAPI
//! value validation with kube-openapi's messages, ratcheting on update, list types, embedded
//! resources, ObjectMeta), printer columns and selectable fields.
//!
//! Not implemented: CEL (`x-kubernetes-validations` rules are checked for shape and stored,
//! never compiled or evaluated) and conversion webhooks (`Webhook` strategies validate, only
//! `None` is served).

mod algorithms;
mod compiled;
mod defaults;
mod fieldpath;
mod formats;
mod gofmt;
mod goregex;
mod json;
mod jsonpath;
mod names;
mod objectmeta;
mod schema_check;
mod structural;
mod validate;
mod value;

#[cfg(test)]
mod tests;

pub use compiled::{CompiledVersion, PrinterColumn, ScaleSpec};
pub use defaults::default_crd;
pub use jsonpath::JsonPath;
pub use names::{accepted_names, Condition, NamesOutcome};
pub use validate::{
    is_protected_group, validate_crd, validate_crd_status_update, validate_crd_update,
    API_APPROVED_ANNOTATION, MAX_SELECTABLE_FIELDS,
};
