//! Tests of the CRD engine, with cases translated from Kubernetes' own test tables
//! (apiextensions-apiserver's validation, schema, pruning, defaulting, listtype,
//! tableconvertor and naming controller tests).

mod crd;
mod names;
mod runtime;
mod schema_validation;
mod values;

use serde_json::{json, Value};

use crate::field::FieldError;

/// Kubernetes' `validationMatch`: every expected (reason, field) matches one distinct error and
/// no error is left over.
pub(super) fn assert_matches(name: &str, errs: &[FieldError], expected: &[(&str, &str)]) {
    let mut seen = vec![false; errs.len()];
    for (reason, field) in expected {
        let found = errs
            .iter()
            .enumerate()
            .position(|(i, e)| !seen[i] && e.reason == *reason && e.field == *field);
        match found {
            Some(i) => seen[i] = true,
            None => panic!("{name}: expected {reason} at {field}, got {errs:#?}"),
        }
    }
    for (i, s) in seen.iter().enumerate() {
        assert!(*s, "{name}: unexpected error: {}", errs[i].message);
    }
}

/// The messages of a list of errors, sorted.
pub(super) fn messages(errs: &[FieldError]) -> Vec<String> {
    let mut m: Vec<String> = errs.iter().map(|e| e.message.clone()).collect();
    m.sort();
    m
}

/// A valid v1 CRD (`foos.example.com`, namespaced, one version `v1`), defaulted and prepared
/// as the registry stores it.
pub(super) fn crd() -> Value {
    let mut c = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "foos", "kind": "Foo"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "replicas": {"type": "integer"},
                            "color": {"type": "string"},
                        }},
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer"},
                        }},
                    },
                }},
            }],
        },
    });
    super::default_crd(&mut c);
    c
}
