//! Cases translated from structured-merge-diff's `typed` tests (toset, symdiff, merge,
//! remove, validate), with SMD's test schemas written as structural JSON schemas.

use serde_json::{json, Value};

use super::*;
use crate::apply::typed::child_ty;
use crate::schema::Schemas;

fn f(s: &str) -> PathElement {
    PathElement::field(s)
}

fn v(x: Value) -> PathElement {
    PathElement::Value(x)
}

fn set(paths: &[&[PathElement]]) -> FieldSet {
    FieldSet::from_paths(paths.iter().copied())
}

/// An untyped, atomic value (SMD's `__untyped_atomic_`).
fn untyped_atomic() -> Value {
    json!({"x-kubernetes-map-type": "atomic"})
}

fn string_pair() -> Schemas {
    Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": untyped_atomic()}
    }))
    .unwrap()
}

fn grab_bag() -> Schemas {
    let set_of =
        |t: &str| json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": t}});
    Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {
            "numeric": {"type": "number"},
            "string": {"type": "string"},
            "bool": {"type": "boolean"},
            "setStr": set_of("string"),
            "setBool": set_of("boolean"),
            "setNumeric": set_of("number"),
            "color": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                "R": {"type": "number"}, "G": {"type": "number"}, "B": {"type": "number"}}},
            "args": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {
                "type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}}},
        }
    }))
    .unwrap()
}

fn associative() -> Schemas {
    Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {
            "list": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["key", "id"],
                "items": {"type": "object", "properties": {
                    "key": {"type": "string"}, "id": {"type": "number"},
                    "value": {"type": "object", "additionalProperties": {"type": "string"}},
                    "bv": {"type": "boolean"}, "nv": {"type": "number"}}}},
            "atomicList": {"type": "array", "items": {"type": "string"}},
            "atomicMap": {"type": "object", "x-kubernetes-map-type": "atomic",
                "additionalProperties": {"type": "string"}},
        }
    }))
    .unwrap()
}

fn ty(s: &Schemas) -> Ty<'_> {
    child_ty(s.root().unwrap(), false)
}

fn key(k: &str, id: i64) -> PathElement {
    PathElement::key(vec![("key".into(), json!(k)), ("id".into(), json!(id))])
}

#[test]
fn to_field_set_of_scalars_atomics_and_sets() {
    let pair = string_pair();
    for (obj, want) in [
        (
            json!({"key": "foo", "value": 1}),
            set(&[&[f("key")], &[f("value")]]),
        ),
        (
            json!({"key": "foo", "value": {"a": "b"}}),
            set(&[&[f("key")], &[f("value")]]),
        ),
        (
            json!({"key": "foo", "value": null}),
            set(&[&[f("key")], &[f("value")]]),
        ),
        (json!({"key": "foo"}), set(&[&[f("key")]])),
    ] {
        assert_eq!(to_field_set(ty(&pair), &obj), want, "{obj}");
    }
    let bag = grab_bag();
    for (obj, want) in [
        (json!({"numeric": 2.5}), set(&[&[f("numeric")]])),
        (json!({"bool": false}), set(&[&[f("bool")]])),
        (
            json!({"setStr": ["a", "b", "c", "a", "b", "c", "c"]}),
            set(&[
                &[f("setStr"), v(json!("a"))],
                &[f("setStr"), v(json!("b"))],
                &[f("setStr"), v(json!("c"))],
            ]),
        ),
        (
            json!({"setBool": [true, false, true]}),
            set(&[
                &[f("setBool"), v(json!(true))],
                &[f("setBool"), v(json!(false))],
            ]),
        ),
        (json!({"color": {}}), set(&[&[f("color")]])),
        (json!({"color": null}), set(&[&[f("color")]])),
        (
            json!({"color": {"R": 255, "G": 0, "B": 0}}),
            set(&[&[f("color")]]),
        ),
        (json!({"args": []}), set(&[&[f("args")]])),
        (
            json!({"args": [{"key": "a", "value": "b"}]}),
            set(&[&[f("args")]]),
        ),
    ] {
        assert_eq!(to_field_set(ty(&bag), &obj), want, "{obj}");
    }
}

#[test]
fn to_field_set_of_associative_lists_and_maps() {
    let s = associative();
    let obj = json!({"list": [
        {"key": "a", "id": 1, "value": {"a": "a"}},
        {"key": "a", "id": 2, "value": {"b": "b"}},
    ]});
    let want = set(&[
        &[f("list"), key("a", 1)],
        &[f("list"), key("a", 1), f("key")],
        &[f("list"), key("a", 1), f("id")],
        &[f("list"), key("a", 1), f("value"), f("a")],
        &[f("list"), key("a", 2)],
        &[f("list"), key("a", 2), f("key")],
        &[f("list"), key("a", 2), f("id")],
        &[f("list"), key("a", 2), f("value"), f("b")],
    ]);
    assert_eq!(to_field_set(ty(&s), &obj), want);
    // Duplicated items are members only; their fields are nobody's.
    let dup = json!({"list": [{"key": "a", "id": 1, "nv": 1}, {"key": "a", "id": 1, "nv": 2}]});
    assert_eq!(
        to_field_set(ty(&s), &dup),
        set(&[&[f("list"), key("a", 1)]])
    );
}

#[test]
fn to_field_set_deduces_without_a_schema() {
    let obj = json!({"a": {"b": 1, "c": [1, 2]}, "d": {}, "e": null});
    let want = set(&[
        &[f("a")],
        &[f("a"), f("b")],
        &[f("a"), f("c")],
        &[f("d")],
        &[f("e")],
    ]);
    assert_eq!(to_field_set(Ty::Deduced, &obj), want);
}

#[test]
fn compare_deduced_values_like_smd() {
    // (lhs, rhs, removed, modified, added) from SMD's symdiff "untyped deduced" cases.
    let cases: Vec<(Value, Value, FieldSet, FieldSet, FieldSet)> = vec![
        (
            json!({"a": {}}),
            json!({"b": {}}),
            set(&[&[f("a")]]),
            set(&[]),
            set(&[&[f("b")]]),
        ),
        (
            json!({"a": {"b": {"c": {}}}}),
            json!({"a": {"b": {}}}),
            set(&[&[f("a"), f("b"), f("c")]]),
            set(&[]),
            set(&[]),
        ),
        (
            json!({"a": null}),
            json!({"a": {"b": {}}}),
            set(&[]),
            set(&[]),
            set(&[&[f("a"), f("b")]]),
        ),
        (
            json!({"a": {"b": {}}}),
            json!({"a": null}),
            set(&[&[f("a"), f("b")]]),
            set(&[]),
            set(&[]),
        ),
        (
            json!({"a": []}),
            json!({"a": ["b"]}),
            set(&[]),
            set(&[&[f("a")]]),
            set(&[]),
        ),
        (
            json!({"a": null}),
            json!({"a": "b"}),
            set(&[]),
            set(&[&[f("a")]]),
            set(&[]),
        ),
        (
            json!({"a": {"b": {}}}),
            json!({"a": ["b"]}),
            set(&[&[f("a"), f("b")]]),
            set(&[&[f("a")]]),
            set(&[]),
        ),
        (
            json!({"a": "b"}),
            json!({"a": {"b": {}}}),
            set(&[]),
            set(&[&[f("a")]]),
            set(&[&[f("a"), f("b")]]),
        ),
        (
            json!({"a": 1}),
            json!({"a": 1.0}),
            set(&[]),
            set(&[]),
            set(&[]),
        ),
    ];
    for (lhs, rhs, removed, modified, added) in cases {
        let c = compare(Ty::Deduced, &lhs, &rhs);
        assert_eq!(c.removed, removed, "removed {lhs} -> {rhs}");
        assert_eq!(c.modified, modified, "modified {lhs} -> {rhs}");
        assert_eq!(c.added, added, "added {lhs} -> {rhs}");
    }
}

#[test]
fn compare_associative_lists_marks_added_items() {
    let s = associative();
    let c = compare(
        ty(&s),
        &json!({"list": [{"key": "a", "id": 1, "nv": 1}]}),
        &json!({"list": [{"key": "a", "id": 1, "nv": 2}, {"key": "b", "id": 1}]}),
    );
    assert_eq!(c.modified, set(&[&[f("list"), key("a", 1), f("nv")]]));
    assert_eq!(
        c.added,
        set(&[
            &[f("list"), key("b", 1)],
            &[f("list"), key("b", 1), f("key")],
            &[f("list"), key("b", 1), f("id")],
        ])
    );
    assert!(c.removed.is_empty());
}

#[test]
fn compare_finds_only_the_change_among_equal_subtrees() {
    let s = associative();
    // Equal siblings (duplicate keys in the list, an atomic map) around one changed number.
    let same = json!([{"key": "a", "id": 1, "nv": 1}, {"key": "a", "id": 1, "nv": 1},
                      {"key": "b", "id": 2, "value": {"x": "y"}}]);
    let lhs = json!({"list": same, "atomicMap": {"k": "v"}, "atomicList": ["p"]});
    let c = compare(ty(&s), &lhs, &lhs.clone());
    assert!(c.removed.is_empty() && c.modified.is_empty() && c.added.is_empty());
    let mut rhs = lhs.clone();
    rhs["list"][2]["value"]["x"] = json!("z");
    let c = compare(ty(&s), &lhs, &rhs);
    assert_eq!(
        c.modified,
        set(&[&[f("list"), key("b", 2), f("value"), f("x")]])
    );
    assert!(c.removed.is_empty() && c.added.is_empty());
    // Changed duplicates are one modified item, as before.
    rhs["list"][1]["nv"] = json!(3);
    let c = compare(ty(&s), &lhs, &rhs);
    assert_eq!(
        c.modified,
        set(&[
            &[f("list"), key("a", 1)],
            &[f("list"), key("b", 2), f("value"), f("x")]
        ])
    );
}

fn check_merges(s: &Schemas, cases: &[(Value, Value, Value)]) {
    for (lhs, rhs, out) in cases {
        let got = merge(ty(s), lhs, rhs).unwrap();
        assert!(equals(&got, out), "{lhs} + {rhs}: want {out}, got {got}");
    }
}

#[test]
fn merge_pairs_and_nulls() {
    check_merges(
        &string_pair(),
        &[
            (
                json!({"key": "foo", "value": {}}),
                json!({"key": "foo", "value": 1}),
                json!({"key": "foo", "value": 1}),
            ),
            (
                json!({"key": "foo", "value": 1}),
                json!({"key": "foo", "value": {}}),
                json!({"key": "foo", "value": {}}),
            ),
            (
                json!({"key": "foo", "value": null}),
                json!({"key": "foo", "value": {}}),
                json!({"key": "foo", "value": {}}),
            ),
            (
                json!({"key": "foo"}),
                json!({"value": true}),
                json!({"key": "foo", "value": true}),
            ),
        ],
    );
    let nested = Schemas::from_json_schema(&json!({
        "type": "object",
        "properties": {"inner": {"type": "object", "additionalProperties": untyped_atomic()},
                       "list": {"type": "array", "items": untyped_atomic()}}
    }))
    .unwrap();
    check_merges(
        &nested,
        &[
            (json!({}), json!({"inner": {}}), json!({"inner": {}})),
            (json!({}), json!({"inner": null}), json!({"inner": null})),
            (
                json!({"inner": null}),
                json!({"inner": {}}),
                json!({"inner": {}}),
            ),
            (
                json!({"inner": {}}),
                json!({"inner": null}),
                json!({"inner": null}),
            ),
            (
                json!({"list": []}),
                json!({"list": null}),
                json!({"list": null}),
            ),
            (
                json!({"list": null}),
                json!({"list": []}),
                json!({"list": []}),
            ),
        ],
    );
}

#[test]
fn merge_sets_keeps_smd_order() {
    let cases: Vec<(Value, Value, Value)> = [
        (&["a", "b", "c"][..], &["a", "b"][..], &["a", "b", "c"][..]),
        (&["a", "b"], &["b", "a"], &["b", "a"]),
        (
            &["a", "b", "c"],
            &["d", "e", "f"],
            &["a", "b", "c", "d", "e", "f"],
        ),
        (
            &["a", "b", "c", "g", "f"],
            &["c", "d", "e", "f"],
            &["a", "b", "c", "g", "d", "e", "f"],
        ),
        (
            &["c", "d", "e", "f"],
            &["a", "c", "e"],
            &["a", "c", "d", "e", "f"],
        ),
        (
            &["a", "b", "c", "x", "y", "z"],
            &["d", "e", "f"],
            &["a", "b", "c", "x", "y", "z", "d", "e", "f"],
        ),
        (
            &["a", "b", "c", "x", "y", "z"],
            &["d", "e", "f", "x", "y", "z"],
            &["a", "b", "c", "d", "e", "f", "x", "y", "z"],
        ),
        (
            &["c", "a", "g", "f"],
            &["c", "f", "a", "g"],
            &["c", "f", "a", "g"],
        ),
        (
            &["a", "b", "c", "d"],
            &["d", "e", "f", "a"],
            &["b", "c", "d", "e", "f", "a"],
        ),
        (
            &["c", "d", "e", "f", "g", "h", "i", "j"],
            &["2", "h", "3", "e", "4", "k", "l"],
            &[
                "c", "d", "f", "g", "2", "h", "i", "j", "3", "e", "4", "k", "l",
            ],
        ),
        (
            &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"],
            &["1", "b", "2", "h", "3", "e", "4", "k", "l"],
            &[
                "a", "1", "b", "c", "d", "f", "g", "2", "h", "i", "j", "3", "e", "4", "k", "l",
            ],
        ),
        // Duplicates on the live side.
        (&["a", "b", "b"], &["c"], &["a", "b", "b", "c"]),
        (&["a", "b", "b"], &["b"], &["a", "b"]),
        (&["a", "b", "b"], &["a"], &["a", "b", "b"]),
        (
            &["a", "b", "c", "d", "e", "c"],
            &["1", "b", "2", "e", "d"],
            &["a", "1", "b", "c", "2", "e", "c", "d"],
        ),
        (
            &["a", "b", "c", "d", "e", "c"],
            &["1", "b", "2", "c", "e", "d"],
            &["a", "1", "b", "2", "c", "e", "d"],
        ),
        (
            &["a", "a", "b", "b"],
            &["b", "c", "d"],
            &["a", "a", "b", "c", "d"],
        ),
        (&["a", "a", "b", "b"], &[], &["a", "a", "b", "b"]),
        (
            &["c", "a", "g", "f", "c", "a"],
            &["c", "f", "a", "g"],
            &["c", "f", "a", "g"],
        ),
    ]
    .iter()
    .map(|(l, r, o)| {
        (
            json!({"setStr": l}),
            json!({"setStr": r}),
            json!({"setStr": o}),
        )
    })
    .collect();
    check_merges(&grab_bag(), &cases);
    check_merges(
        &grab_bag(),
        &[
            (
                json!({"setBool": [true]}),
                json!({"setBool": [false]}),
                json!({"setBool": [true, false]}),
            ),
            (
                json!({"setNumeric": [1, 2, 2.5]}),
                json!({"setNumeric": [1, 2, 3]}),
                json!({"setNumeric": [1, 2, 2.5, 3]}),
            ),
            (
                json!({"setBool": [true, false, true]}),
                json!({"setBool": [true]}),
                json!({"setBool": [true, false]}),
            ),
            (
                json!({"numeric": 1}),
                json!({"numeric": 2.5}),
                json!({"numeric": 2.5}),
            ),
            (
                json!({"string": "aoeu"}),
                json!({"bool": true}),
                json!({"string": "aoeu", "bool": true}),
            ),
        ],
    );
}

#[test]
fn merge_associative_lists_by_key() {
    let item = |k: &str, id: i64| json!({"key": k, "id": id});
    check_merges(
        &associative(),
        &[
            (
                json!({"list": [{"key": "a", "id": 1, "value": {"a": "a"}}]}),
                json!({"list": [{"key": "a", "id": 2, "value": {"a": "a"}}]}),
                json!({"list": [{"key": "a", "id": 1, "value": {"a": "a"}}, {"key": "a", "id": 2, "value": {"a": "a"}}]}),
            ),
            (
                json!({"list": [item("a", 1), item("b", 1)]}),
                json!({"list": [item("a", 1), item("a", 2)]}),
                json!({"list": [item("a", 1), item("b", 1), item("a", 2)]}),
            ),
            (
                json!({"list": [item("b", 2)]}),
                json!({"list": [item("a", 1), item("b", 2), item("c", 3)]}),
                json!({"list": [item("a", 1), item("b", 2), item("c", 3)]}),
            ),
            (
                json!({"list": [item("a", 1), item("b", 2), item("c", 3)]}),
                json!({"list": [item("c", 3), item("b", 2)]}),
                json!({"list": [item("a", 1), item("c", 3), item("b", 2)]}),
            ),
            (
                json!({"list": [item("a", 1), item("b", 2), item("c", 3)]}),
                json!({"list": [item("c", 3), item("a", 1)]}),
                json!({"list": [item("b", 2), item("c", 3), item("a", 1)]}),
            ),
            (
                json!({"atomicList": ["a", "a", "a"]}),
                json!({"atomicList": null}),
                json!({"atomicList": null}),
            ),
            (
                json!({"atomicList": ["a", "b", "c"]}),
                json!({"atomicList": []}),
                json!({"atomicList": []}),
            ),
            (
                json!({"list": [{"key": "a", "id": 1, "bv": true}, item("b", 2), {"key": "a", "id": 1, "bv": false, "nv": 2}]}),
                json!({"list": [{"key": "a", "id": 1, "nv": 3}, item("c", 3), item("b", 2)]}),
                json!({"list": [{"key": "a", "id": 1, "nv": 3}, item("c", 3), item("b", 2)]}),
            ),
            (
                json!({"list": [{"key": "a", "id": 1, "nv": 1}, {"key": "a", "id": 1, "nv": 2}]}),
                json!({"list": []}),
                json!({"list": [{"key": "a", "id": 1, "nv": 1}, {"key": "a", "id": 1, "nv": 2}]}),
            ),
            (
                json!({"atomicMap": {"a": "x", "b": "y"}}),
                json!({"atomicMap": {"c": "z"}}),
                json!({"atomicMap": {"c": "z"}}),
            ),
        ],
    );
}

#[test]
fn merge_rejects_duplicate_keys_in_the_configuration() {
    let s = associative();
    let err = merge(
        ty(&s),
        &json!({}),
        &json!({"list": [{"key": "a", "id": 1}, {"key": "a", "id": 1}]}),
    )
    .unwrap_err();
    assert_eq!(
        errors_string(&err),
        ".list: duplicate entries for key [id=1,key=\"a\"]"
    );
}

#[test]
fn remove_and_extract_items() {
    let s = associative();
    let obj = json!({
        "list": [{"key": "a", "id": 1, "nv": 1, "bv": true}, {"key": "b", "id": 2, "nv": 2}],
        "atomicList": ["x"],
        "atomicMap": {"k": "v"},
    });
    let removed = remove_items(
        ty(&s),
        &obj,
        &set(&[
            &[f("list"), key("a", 1), f("bv")],
            &[f("list"), key("b", 2)],
            &[f("atomicMap")],
        ]),
    );
    assert_eq!(
        removed,
        json!({"list": [{"key": "a", "id": 1, "nv": 1}], "atomicList": ["x"]})
    );
    // Removing every field the walk reaches leaves null behind, as SMD does.
    let emptied = remove_items(
        ty(&s),
        &json!({"list": [{"key": "a", "id": 1}]}),
        &set(&[&[f("list"), key("a", 1)]]),
    );
    assert_eq!(emptied, json!({"list": null}));
    let extracted = extract_items(
        ty(&s),
        &obj,
        &set(&[&[f("list"), key("a", 1), f("nv")], &[f("atomicList")]]),
    );
    assert_eq!(extracted, json!({"list": [{"nv": 1}], "atomicList": ["x"]}));
}

#[test]
fn validate_reports_smd_errors() {
    let s = associative();
    let errs = validate(
        ty(&s),
        &json!({"list": [{"key": "a", "id": 1, "bogus": 1}]}),
        false,
    );
    assert_eq!(
        errors_string(&errs),
        ".list[id=1,key=\"a\"].bogus: field not declared in schema"
    );
    let errs = validate(ty(&s), &json!({"list": [{"key": "a"}]}), false);
    assert_eq!(
        errors_string(&errs),
        ".list: element 0: associative list with keys has an element that omits key field \"id\" (and doesn't have default value)"
    );
    let dups = json!({"list": [{"key": "a", "id": 1}, {"key": "a", "id": 1}]});
    assert_eq!(
        errors_string(&validate(ty(&s), &dups, false)),
        ".list: duplicate entries for key [id=1,key=\"a\"]"
    );
    assert!(validate(ty(&s), &dups, true).is_empty());
    let bag = grab_bag();
    let errs = validate(ty(&bag), &json!({"numeric": "1", "bool": 1}), false);
    assert_eq!(
        errors_string(&errs),
        "errors:\n  .bool: expected boolean, got &{1}\n  .numeric: expected numeric (int or float), got string"
    );
    assert!(validate(Ty::Deduced, &json!({"any": [1, {"x": null}]}), false).is_empty());
}

#[test]
fn builtin_pod_apply_configuration_validates() {
    let pod = crate::apply::typed::root_ty(Schemas::builtin().for_kind("", "v1", "Pod"));
    let cfg = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}
    });
    assert!(validate(pod, &cfg, false).is_empty());
    let bad = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "foo": 1}]}});
    assert_eq!(
        errors_string(&validate(pod, &bad, false)),
        ".spec.containers[name=\"c\"].foo: field not declared in schema"
    );
}
