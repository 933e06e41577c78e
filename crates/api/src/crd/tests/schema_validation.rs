//! `TestValidateCustomResourceDefinitionValidation` (apiextensions validation_test.go): the
//! openAPIV3Schema rules with explicit options.

use serde_json::{json, Value};

use super::assert_matches;
use crate::crd::schema_check::{validate_validation, SchemaOpts};

const P: &str = "spec.validation.openAPIV3Schema";

fn none() -> SchemaOpts {
    SchemaOpts {
        allow_defaults: false,
        require_valid_property_type: false,
        require_structural: false,
        require_pruned_defaults: false,
        require_atomic_set_type: false,
        require_map_list_keys_map_set_validation: false,
    }
}

fn check(name: &str, schema: Value, status: bool, opts: SchemaOpts, expected: &[(&str, &str)]) {
    let validation = json!({ "openAPIV3Schema": schema });
    let errs = validate_validation(Some(&validation), status, &opts, "spec.validation");
    let expected: Vec<(&str, String)> = expected
        .iter()
        .map(|(r, f)| {
            (
                *r,
                if f.is_empty() {
                    P.to_string()
                } else {
                    format!("{P}.{f}")
                },
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = expected.iter().map(|(r, f)| (*r, f.as_str())).collect();
    assert_matches(name, &errs, &refs);
}

const REQ: &str = "FieldValueRequired";
const INV: &str = "FieldValueInvalid";
const UNS: &str = "FieldValueNotSupported";
const FORB: &str = "FieldValueForbidden";

#[test]
fn root_rules_with_status() {
    check(
        "root type without status",
        json!({"type": "string"}),
        false,
        none(),
        &[],
    );
    check(
        "root type having invalid value, with status",
        json!({"type": "string"}),
        true,
        none(),
        &[(INV, "type")],
    );
    check(
        "non-allowed root field with status",
        json!({"anyOf": [{"description": "First schema"}, {"description": "Second schema"}]}),
        true,
        none(),
        &[(INV, "")],
    );
    check(
        "all allowed fields at the root of the schema with status",
        json!({
            "description": "This is a description", "type": "object", "format": "date-time",
            "title": "This is a title", "maximum": 10, "exclusiveMaximum": true, "minimum": 5,
            "exclusiveMinimum": true, "maxLength": 10, "minLength": 5, "pattern": "^[a-z]$",
            "maxItems": 10, "minItems": 5, "multipleOf": 3, "required": ["spec", "status"],
            "items": {"description": "This is a schema nested under Items"},
            "properties": {"spec": {}, "status": {}},
            "externalDocs": {"description": "This is an external documentation description"},
            "example": {"foo": "bar"},
        }),
        true,
        none(),
        &[],
    );
    check(
        "nullable at the root",
        json!({"type": "object", "nullable": true}),
        false,
        none(),
        &[(FORB, "nullable")],
    );
    let errs = validate_validation(
        Some(&json!({"openAPIV3Schema": {"anyOf": [{}]}})),
        true,
        &none(),
        "spec.validation",
    );
    assert_eq!(
        errs[0].message,
        "spec.validation.openAPIV3Schema: Invalid value: apiextensions.JSONSchemaProps{...}: only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled"
    );
}

#[test]
fn types_and_nullable() {
    check(
        "null type",
        json!({"properties": {"null": {"type": "null"}}}),
        false,
        none(),
        &[(FORB, "properties[null].type")],
    );
    check(
        "nullable without type",
        json!({"properties": {"nullable": {"nullable": true}}}),
        false,
        none(),
        &[],
    );
    check(
        "nullable with types",
        json!({"properties": {
            "object": {"type": "object", "nullable": true},
            "array": {"type": "array", "nullable": true},
            "number": {"type": "number", "nullable": true},
            "string": {"type": "string", "nullable": true},
        }}),
        false,
        none(),
        &[],
    );
    let structural = SchemaOpts {
        require_structural: true,
        ..none()
    };
    check(
        "must be structural, but isn't",
        json!({}),
        false,
        structural.clone(),
        &[(REQ, "type")],
    );
    check(
        "must be structural",
        json!({"type": "object"}),
        false,
        structural,
        &[],
    );
    let valid_types = SchemaOpts {
        require_valid_property_type: true,
        require_structural: true,
        ..none()
    };
    check(
        "require valid types, valid",
        json!({"type": "object"}),
        false,
        valid_types.clone(),
        &[],
    );
    check(
        "require valid types, invalid null",
        json!({"type": "null"}),
        false,
        valid_types.clone(),
        &[(UNS, "type"), (FORB, "type"), (INV, "type")],
    );
    check(
        "require valid types, invalid bogus",
        json!({"type": "bogus"}),
        false,
        valid_types,
        &[(UNS, "type"), (INV, "type")],
    );
}

#[test]
fn list_and_map_types() {
    type Case<'a> = (&'a str, Value, SchemaOpts, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            "invalid type with list type extension set",
            json!({"type": "object", "x-kubernetes-list-type": "set"}),
            none(),
            vec![(INV, "type")],
        ),
        (
            "unset type with list type extension set",
            json!({"x-kubernetes-list-type": "set"}),
            none(),
            vec![(REQ, "type")],
        ),
        (
            "invalid list type extension",
            json!({"type": "array", "x-kubernetes-list-type": "invalid"}),
            none(),
            vec![(UNS, "x-kubernetes-list-type")],
        ),
        (
            "invalid list type extension with list map keys extension non-empty",
            json!({"type": "array", "x-kubernetes-list-type": "set", "x-kubernetes-list-map-keys": ["key"]}),
            none(),
            vec![(INV, "x-kubernetes-list-type")],
        ),
        (
            "unset list type extension with list map keys extension non-empty",
            json!({"x-kubernetes-list-map-keys": ["key"]}),
            none(),
            vec![(REQ, "x-kubernetes-list-type")],
        ),
        (
            "empty list map keys extension with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map"}),
            none(),
            vec![(REQ, "x-kubernetes-list-map-keys"), (REQ, "items")],
        ),
        (
            "no items schema with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"]}),
            none(),
            vec![(REQ, "items")],
        ),
        (
            "multiple schema items with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": [{"type": "string"}, {"type": "integer"}]}),
            none(),
            vec![(FORB, "items"), (INV, "items")],
        ),
        (
            "non object item with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"], "items": {"type": "string"}}),
            none(),
            vec![(INV, "items.type")],
        ),
        (
            "items with key missing from properties with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"], "items": {"type": "object"}}),
            none(),
            vec![(INV, "x-kubernetes-list-map-keys")],
        ),
        (
            "items with non scalar key property type with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "properties": {"key": {"type": "object"}}}}),
            none(),
            vec![(INV, "items.properties[key].type")],
        ),
        (
            "duplicate map keys with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key", "key"],
                   "items": {"type": "object", "properties": {"key": {"type": "string"}}}}),
            none(),
            vec![(INV, "x-kubernetes-list-map-keys")],
        ),
        (
            "allowed schema with list type extension map",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["keyA", "keyB"],
                   "items": {"type": "object", "properties": {"keyA": {"type": "string"}, "keyB": {"type": "integer"}}}}),
            none(),
            vec![],
        ),
        (
            "allowed list-type atomic",
            json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}}),
            none(),
            vec![],
        ),
        (
            "allowed list-type atomic with non-atomic items",
            json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "object", "properties": {}}}),
            none(),
            vec![],
        ),
        (
            "allowed list-type set with scalar items",
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}),
            none(),
            vec![],
        ),
        (
            "allowed list-type set with atomic map items",
            json!({"type": "array", "x-kubernetes-list-type": "set",
                   "items": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"foo": {"type": "string"}}}}),
            none(),
            vec![],
        ),
        (
            "invalid list-type set with non-atomic map items",
            json!({"type": "array", "x-kubernetes-list-type": "set",
                   "items": {"type": "object", "x-kubernetes-map-type": "granular", "properties": {"foo": {"type": "string"}}}}),
            SchemaOpts {
                require_atomic_set_type: true,
                ..none()
            },
            vec![(INV, "items.x-kubernetes-map-type")],
        ),
        (
            "invalid list-type set with unspecified map-type for map items",
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object", "properties": {"foo": {"type": "string"}}}}),
            SchemaOpts {
                require_atomic_set_type: true,
                ..none()
            },
            vec![(INV, "items.x-kubernetes-map-type")],
        ),
        (
            "allowed list-type set with atomic list items",
            json!({"type": "array", "x-kubernetes-list-type": "set",
                   "items": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}}}),
            none(),
            vec![],
        ),
        (
            "invalid list-type set with with non-atomic list items",
            json!({"type": "array", "x-kubernetes-list-type": "set",
                   "items": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
            SchemaOpts {
                require_atomic_set_type: true,
                ..none()
            },
            vec![(INV, "items.x-kubernetes-list-type")],
        ),
        (
            "invalid type with map type extension (granular)",
            json!({"type": "array", "x-kubernetes-map-type": "granular"}),
            none(),
            vec![(INV, "type")],
        ),
        (
            "unset type with map type extension (granular)",
            json!({"x-kubernetes-map-type": "granular"}),
            none(),
            vec![(REQ, "type")],
        ),
        (
            "invalid type with map type extension (atomic)",
            json!({"type": "array", "x-kubernetes-map-type": "atomic"}),
            none(),
            vec![(INV, "type")],
        ),
        (
            "invalid map type",
            json!({"type": "object", "x-kubernetes-map-type": "badMapType"}),
            none(),
            vec![(UNS, "x-kubernetes-map-type")],
        ),
        (
            "allowed type with map type extension (granular)",
            json!({"type": "object", "x-kubernetes-map-type": "granular"}),
            none(),
            vec![],
        ),
        (
            "invalid map with non-required key and no default",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "properties": {"key": {"type": "string"}}}}),
            SchemaOpts {
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![(REQ, "items.properties[key].default")],
        ),
        (
            "allowed map with required key and no default",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "required": ["key"], "properties": {"key": {"type": "string"}}}}),
            SchemaOpts {
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![],
        ),
        (
            "allowed map with non-required key and default",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "properties": {"key": {"type": "string", "default": "stuff"}}}}),
            SchemaOpts {
                allow_defaults: true,
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![],
        ),
        (
            "invalid map with nullable key",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "properties": {"key": {"type": "string", "nullable": true}}}}),
            SchemaOpts {
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![
                (REQ, "items.properties[key].default"),
                (FORB, "items.properties[key].nullable"),
            ],
        ),
        (
            "invalid map with nullable items",
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"],
                   "items": {"type": "object", "nullable": true, "properties": {"key": {"type": "string"}}}}),
            SchemaOpts {
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![
                (FORB, "items.nullable"),
                (REQ, "items.properties[key].default"),
            ],
        ),
        (
            "invalid set with nullable items",
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string", "nullable": true}}),
            SchemaOpts {
                require_map_list_keys_map_set_validation: true,
                ..none()
            },
            vec![(FORB, "items.nullable")],
        ),
    ];
    for (name, schema, opts, expected) in cases {
        check(name, schema, false, opts, &expected);
    }
}

#[test]
fn unsupported_keywords_and_validation_rules() {
    check(
        "unsupported keywords",
        json!({"type": "object", "id": "x", "$ref": "#/a", "additionalItems": false,
               "patternProperties": {"a": {}}, "definitions": {"d": {}}, "dependencies": {"a": ["b"]},
               "uniqueItems": true, "x-kubernetes-preserve-unknown-fields": false}),
        false,
        none(),
        &[
            (FORB, "id"),
            (FORB, "$ref"),
            (FORB, "additionalItems"),
            (FORB, "patternProperties"),
            (FORB, "definitions"),
            (FORB, "dependencies"),
            (FORB, "uniqueItems"),
            (INV, "x-kubernetes-preserve-unknown-fields"),
        ],
    );
    check(
        "additionalProperties and properties forbidden",
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        false,
        none(),
        &[(FORB, "additionalProperties")],
    );
    check(
        "x-kubernetes-validations should have valid reason and fieldPath",
        json!({"type": "object", "properties": {"f": {"type": "string"}}, "x-kubernetes-validations": [
            {"rule": "self.f == 'a'", "reason": "BadReason", "fieldPath": ".g"},
            {"rule": " ", "message": "m"},
            {"rule": "a\nb"},
            {"rule": "ok", "message": "  ", "messageExpression": " ", "fieldPath": " "},
        ]}),
        false,
        none(),
        &[
            (UNS, "x-kubernetes-validations[0].reason"),
            (INV, "x-kubernetes-validations[0].fieldPath"),
            (REQ, "x-kubernetes-validations[1].rule"),
            (REQ, "x-kubernetes-validations[2].message"),
            (INV, "x-kubernetes-validations[3].message"),
            (REQ, "x-kubernetes-validations[3].messageExpression"),
            (INV, "x-kubernetes-validations[3].fieldPath"),
            (INV, "x-kubernetes-validations[3].fieldPath"),
        ],
    );
    check(
        "default forbidden in top-level metadata",
        json!({"type": "object", "properties": {"metadata": {"type": "object", "default": {"name": "x"}}}}),
        false,
        SchemaOpts {
            allow_defaults: true,
            ..none()
        },
        &[(FORB, "properties[metadata].default")],
    );
    let errs = validate_validation(
        Some(
            &json!({"openAPIV3Schema": {"type": "object", "properties": {"metadata": {"type": "object", "default": {}}}}}),
        ),
        false,
        &SchemaOpts {
            allow_defaults: true,
            ..none()
        },
        "spec.validation",
    );
    assert_eq!(
        errs[0].message,
        "spec.validation.openAPIV3Schema.properties[metadata].default: Forbidden: must not be set in top-level metadata"
    );
}
