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

/// This machine's architecture as Go names it (GOARCH), which is what Kubernetes reports (node
/// labels and info, `/version`'s platform, User-Agents).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "arm" => "arm",
        other => other,
    }
}
