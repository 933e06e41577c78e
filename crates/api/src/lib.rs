//! The Kubernetes v1.32 API as data and pure functions, with no IO: the catalogue of built-in
//! resources, label and field selectors, patch engines, per-kind defaulting and validation, and
//! server-side table columns. The API server (crates/apiserver) drives these.

pub mod apply;
pub mod catalogue;
pub mod convert;
pub mod crd;
pub mod defaults;
pub mod field;
pub mod fields;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod schema;
pub mod selector;
pub mod table;
pub mod validation;
