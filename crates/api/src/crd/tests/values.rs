//! Value validation messages (`TestValidateCustomResource` in apiextensions'
//! apiserver/validation), through the same kube-openapi emulation custom resources use.

use serde_json::{json, Value};

use crate::crd::value::{Mode, Patterns, Validator};
use crate::schema::Schemas;

fn errors(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let arena = Schemas::from_json_schema(schema).unwrap();
    let patterns = Patterns::new();
    let v = Validator {
        patterns: &patterns,
        mode: Mode::CustomResource,
    };
    let mut out: Vec<String> = v
        .validate_root(arena.root().unwrap(), obj, old)
        .field_errors(None)
        .into_iter()
        .map(|e| e.message)
        .collect();
    out.sort();
    out
}

fn field(schema: Value) -> Value {
    json!({"type": "object", "properties": {"field": schema}})
}

fn check(name: &str, schema: Value, ok: &[Value], failing: &[(Value, &[&str])]) {
    for o in ok {
        assert_eq!(
            errors(&schema, o, None),
            Vec::<String>::new(),
            "{name}: {o}"
        );
    }
    for (o, want) in failing {
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(errors(&schema, o, None), want, "{name}: {o}");
    }
}

#[test]
fn nullable_and_types() {
    check(
        "!nullable",
        field(json!({"type": "object", "nullable": false})),
        &[json!({}), json!({"field": {}})],
        &[
            (
                json!({"field": "foo"}),
                &[
                    r#"field: Invalid value: "string": field in body must be of type object: "string""#,
                ],
            ),
            (
                json!({"field": 42}),
                &[
                    r#"field: Invalid value: "integer": field in body must be of type object: "integer""#,
                ],
            ),
            (
                json!({"field": true}),
                &[
                    r#"field: Invalid value: "boolean": field in body must be of type object: "boolean""#,
                ],
            ),
            (
                json!({"field": 1.2}),
                &[
                    r#"field: Invalid value: "number": field in body must be of type object: "number""#,
                ],
            ),
            (
                json!({"field": []}),
                &[
                    r#"field: Invalid value: "array": field in body must be of type object: "array""#,
                ],
            ),
            (
                json!({"field": null}),
                &[r#"field: Invalid value: "null": field in body must be of type object: "null""#],
            ),
        ],
    );
    check(
        "nullable",
        field(json!({"type": "object", "nullable": true})),
        &[json!({}), json!({"field": {}}), json!({"field": null})],
        &[(
            json!({"field": "foo"}),
            &[r#"field: Invalid value: "string": field in body must be of type object: "string""#],
        )],
    );
    check(
        "nullable and no type",
        field(json!({"nullable": true})),
        &[
            json!({"field": null}),
            json!({"field": "foo"}),
            json!({"field": 42}),
            json!({"field": []}),
        ],
        &[],
    );
    check(
        "x-kubernetes-int-or-string",
        field(json!({"x-kubernetes-int-or-string": true})),
        &[json!({}), json!({"field": 42}), json!({"field": "foo"})],
        &[
            (
                json!({"field": null}),
                &[
                    r#"field: Invalid value: "null": field in body must be of type integer,string: "null""#,
                ],
            ),
            (
                json!({"field": true}),
                &[
                    r#"field: Invalid value: "boolean": field in body must be of type integer,string: "boolean""#,
                ],
            ),
            (
                json!({"field": 1.2}),
                &[
                    r#"field: Invalid value: "number": field in body must be of type integer,string: "number""#,
                ],
            ),
            (
                json!({"field": {}}),
                &[
                    r#"field: Invalid value: "object": field in body must be of type integer,string: "object""#,
                ],
            ),
        ],
    );
    check(
        "nullable, x-kubernetes-int-or-string and user-provided anyOf",
        field(json!({"nullable": true, "x-kubernetes-int-or-string": true,
                     "anyOf": [{"type": "integer"}, {"type": "string"}]})),
        &[
            json!({}),
            json!({"field": null}),
            json!({"field": 42}),
            json!({"field": "foo"}),
        ],
        &[(
            json!({"field": true}),
            &[
                r#"<nil>: Invalid value: "": "field" must validate at least one schema (anyOf)"#,
                r#"field: Invalid value: "boolean": field in body must be of type integer,string: "boolean""#,
                r#"field: Invalid value: "boolean": field in body must be of type integer: "boolean""#,
            ],
        )],
    );
    check(
        "nullable, x-kubernetes-int-or-string and user-provider allOf",
        field(json!({"nullable": true, "x-kubernetes-int-or-string": true,
                     "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}]})),
        &[json!({"field": 42}), json!({"field": "foo"})],
        &[(
            json!({"field": 1.2}),
            &[
                r#"<nil>: Invalid value: "": "field" must validate all the schemas (allOf). None validated"#,
                r#"<nil>: Invalid value: "": "field" must validate at least one schema (anyOf)"#,
                r#"field: Invalid value: "number": field in body must be of type integer,string: "number""#,
                r#"field: Invalid value: "number": field in body must be of type integer: "number""#,
            ],
        )],
    );
}

#[test]
fn value_constraints() {
    check(
        "invalid regex",
        field(json!({"type": "string", "pattern": "+"})),
        &[],
        &[(
            json!({"field": "foo"}),
            &["field: Invalid value: \"foo\": field in body should match '+, but pattern is invalid: error parsing regexp: missing argument to repetition operator: `+`'"],
        )],
    );
    check(
        "required field",
        json!({"type": "object", "required": ["field"], "properties": {
            "field": {"type": "object", "required": ["nested"], "properties": {"nested": {}}}}}),
        &[],
        &[
            (json!({"test": "a"}), &["field: Required value"]),
            (json!({"field": {}}), &["field.nested: Required value"]),
        ],
    );
    check(
        "enum",
        field(
            json!({"type": "object", "required": ["nestedint", "nestedstring"], "properties": {
                "nestedint": {"type": "integer", "enum": [1, 2]},
                "nestedstring": {"type": "string", "enum": ["a", "b"]},
            }}),
        ),
        &[json!({"field": {"nestedint": 1, "nestedstring": "b"}})],
        &[
            (
                json!({"field": {}}),
                &[
                    "field.nestedint: Required value",
                    "field.nestedstring: Required value",
                ],
            ),
            (
                json!({"field": {"nestedint": "x", "nestedstring": true}}),
                &[
                    r#"field.nestedint: Invalid value: "string": field.nestedint in body must be of type integer: "string""#,
                    r#"field.nestedint: Unsupported value: "x": supported values: "1", "2""#,
                    r#"field.nestedstring: Invalid value: "boolean": field.nestedstring in body must be of type string: "boolean""#,
                    r#"field.nestedstring: Unsupported value: true: supported values: "a", "b""#,
                ],
            ),
        ],
    );
    let too_many = json!({"type": "object", "properties": {
        "fieldX": {"type": "object", "maxProperties": 2},
        "fieldY": {"type": "array", "maxItems": 2},
        "fieldZ": {"type": "string", "maxLength": 2},
    }});
    assert_eq!(
        errors(
            &too_many,
            &json!({"fieldX": {"a": true, "b": true, "c": true}, "fieldY": ["a", "b", "c"], "fieldZ": "abc"}),
            None
        ),
        vec![
            "fieldX: Too many: 3: must have at most 2 items",
            "fieldY: Too many: 3: must have at most 2 items",
            "fieldZ: Too long: may not be more than 2 bytes",
        ]
    );
    let numbers = json!({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 1, "maximum": 10, "exclusiveMaximum": true},
        "b": {"type": "number", "multipleOf": 0.5},
        "c": {"type": "string", "minLength": 2, "format": "date"},
        "d": {"type": "array", "minItems": 2, "uniqueItems": true},
        "e": {"type": "object", "minProperties": 1, "additionalProperties": false, "properties": {"x": {"type": "string"}}},
        "f": {"type": "integer", "format": "int32"},
        "g": {"type": "integer"},
    }});
    assert_eq!(
        errors(
            &numbers,
            &json!({"a": 10, "b": 1.25, "c": "x", "d": ["a"], "e": {"x": "1", "y": 2}, "f": "s", "g": 1.0}),
            None
        ),
        vec![
            r#"a: Invalid value: 10: a in body should be less than 10"#,
            r#"b: Invalid value: 1.25: b in body should be a multiple of 0.5"#,
            r#"c: Invalid value: "x": c in body must be of type date: "x""#,
            r#"c: Invalid value: "x": c in body should be at least 2 chars long"#,
            r#"d: Invalid value: 1: d in body should have at least 2 items"#,
            r#"e: Invalid value: "y": e.y in body is a forbidden property"#,
            r#"f: Invalid value: "string": f in body must be of type integer: "string""#,
        ]
    );
    assert_eq!(
        errors(
            &numbers,
            &json!({"a": 0, "c": "2020-13-01", "d": ["a", "a"]}),
            None
        ),
        vec![
            r#"a: Invalid value: 0: a in body should be greater than or equal to 1"#,
            r#"c: Invalid value: "2020-13-01": c in body must be of type date: "2020-13-01""#,
            r#"d: Invalid value: "": d in body shouldn't contain duplicates"#,
        ]
    );
    let one_of = field(json!({"oneOf": [{"type": "string"}, {"type": "string", "minLength": 1}]}));
    assert_eq!(
        errors(&one_of, &json!({"field": "abc"}), None),
        vec![
            r#"<nil>: Invalid value: "": "field" must validate one and only one schema (oneOf). Found 2 valid alternatives"#
        ]
    );
    let not = field(json!({"type": "string", "not": {"enum": ["bad"]}}));
    assert_eq!(
        errors(&not, &json!({"field": "bad"}), None),
        vec![r#"<nil>: Invalid value: "": "field" must not validate the schema (not)"#]
    );
}

#[test]
fn ratcheting_drops_errors_in_unchanged_parts() {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "a": {"type": "string", "maxLength": 2},
            "b": {"type": "string", "maxLength": 2},
            "list": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                     "items": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer", "maximum": 5}}}},
            "atomic": {"type": "array", "items": {"type": "integer", "maximum": 5}},
        }},
    }});
    let old =
        json!({"spec": {"a": "long", "b": "ok", "list": [{"k": "x", "v": 9}], "atomic": [9]}});
    // Unchanged invalid values are tolerated; a newly invalid one is not.
    let new = json!({"spec": {"a": "long", "b": "long", "list": [{"k": "y", "v": 1}, {"k": "x", "v": 9}], "atomic": [9]}});
    assert_eq!(
        errors(&schema, &new, Some(&old)),
        vec!["spec.b: Too long: may not be more than 2 bytes"]
    );
    // Without the old object everything is reported.
    assert_eq!(errors(&schema, &new, None).len(), 4);
    // A changed atomic list is validated as a whole.
    let new = json!({"spec": {"a": "ok", "atomic": [9, 1]}});
    assert_eq!(
        errors(&schema, &new, Some(&old)),
        vec!["spec.atomic[0]: Invalid value: 9: spec.atomic[0] in body should be less than or equal to 5"]
    );
}
