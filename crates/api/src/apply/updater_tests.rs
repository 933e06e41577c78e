//! Sequences of applies and updates translated from structured-merge-diff's `merge` tests
//! (leaf, set, key, nested, multiple appliers, deduced, ignore), run through [`Updater`].

use serde_json::{json, Value};

use super::*;
use crate::apply::path::{path_string, PathElement};
use crate::apply::typed::child_ty;
use crate::schema::Schemas;

enum Op {
    Apply(&'static str, &'static str, Value),
    /// An apply that must fail with exactly these (manager, path) conflicts.
    Conflicts(
        &'static str,
        &'static str,
        Value,
        Vec<(&'static str, &'static str)>,
    ),
    Force(&'static str, &'static str, Value),
    Update(&'static str, &'static str, Value),
}

struct State {
    live: Value,
    managers: Managers,
}

fn apply_op(
    u: &Updater<'_, '_>,
    s: &mut State,
    m: &str,
    v: &str,
    obj: &Value,
    force: bool,
) -> Result<(), UpdateError> {
    let mut managers = s.managers.clone();
    let new = u.apply(&s.live, obj, v, &mut managers, m, force)?;
    s.managers = managers;
    if let Some(new) = new {
        s.live = new;
    }
    Ok(())
}

fn sorted_conflicts(got: &[(String, FieldSet)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = got
        .iter()
        .flat_map(|(mgr, set)| {
            set.paths()
                .into_iter()
                .map(move |p| (mgr.clone(), path_string(&p)))
        })
        .collect();
    out.sort();
    out
}

fn run(ty: Ty<'_>, ignored: &FieldSet, ops: Vec<Op>) -> State {
    let u = Updater { ty, ignored };
    let mut s = State {
        live: Value::Null,
        managers: Managers::new(),
    };
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Apply(m, v, obj) => apply_op(&u, &mut s, m, v, &obj, false)
                .unwrap_or_else(|e| panic!("op {i}: apply by {m} failed: {e:?}")),
            Op::Force(m, v, obj) => apply_op(&u, &mut s, m, v, &obj, true)
                .unwrap_or_else(|e| panic!("op {i}: forced apply by {m} failed: {e:?}")),
            Op::Conflicts(m, v, obj, want) => {
                let before = s.managers.clone();
                match apply_op(&u, &mut s, m, v, &obj, false) {
                    Err(UpdateError::Conflicts(got)) => {
                        let mut want: Vec<(String, String)> = want
                            .iter()
                            .map(|(a, b)| (a.to_string(), b.to_string()))
                            .collect();
                        want.sort();
                        assert_eq!(sorted_conflicts(&got), want, "op {i}: conflicts");
                    }
                    other => panic!("op {i}: expected conflicts, got {other:?}"),
                }
                assert_eq!(s.managers, before, "a failed apply changes nothing");
            }
            Op::Update(m, v, obj) => {
                u.update(&s.live, &obj, v, &mut s.managers, m)
                    .unwrap_or_else(|e| panic!("op {i}: update failed: {e:?}"));
                s.live = obj;
            }
        }
    }
    s
}

/// Expected managers: (manager, version, paths).
type Want = Vec<(&'static str, &'static str, Vec<Vec<PathElement>>)>;

fn check(ty: Ty<'_>, ignored: &FieldSet, ops: Vec<Op>, object: Value, managed: Want) {
    let s = run(ty, ignored, ops);
    assert_eq!(s.live, object, "live object");
    let got: Vec<(String, String, FieldSet)> = s
        .managers
        .iter()
        .map(|(m, vs)| (m.clone(), vs.api_version.clone(), vs.set.clone()))
        .collect();
    let mut want: Vec<(String, String, FieldSet)> = managed
        .into_iter()
        .map(|(m, v, paths)| {
            (
                m.to_string(),
                v.to_string(),
                FieldSet::from_paths(paths.iter().map(Vec::as_slice)),
            )
        })
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    for ((gm, gv, gs), (wm, wv, ws)) in got.iter().zip(&want) {
        assert_eq!((gm, gv), (wm, wv), "manager and version");
        assert_eq!(gs.paths(), ws.paths(), "fields of {gm}");
    }
    assert_eq!(got.len(), want.len(), "managers: {got:?}");
}

fn f(s: &str) -> PathElement {
    PathElement::field(s)
}

fn kn(name: &str) -> PathElement {
    PathElement::key(vec![("name".into(), json!(name))])
}

fn v(x: &str) -> PathElement {
    PathElement::Value(json!(x))
}

fn p(parts: &[PathElement]) -> Vec<PathElement> {
    parts.to_vec()
}

fn leaf_fields() -> Schemas {
    Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "numeric": {"type": "number"}, "string": {"type": "string"}, "bool": {"type": "boolean"}}}))
    .unwrap()
}

fn ty(s: &Schemas) -> Ty<'_> {
    child_ty(s.root().unwrap(), false)
}

fn none() -> FieldSet {
    FieldSet::new()
}

#[test]
fn leaf_apply_twice() {
    let s = leaf_fields();
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"numeric": 1, "string": "string"})),
            Op::Apply(
                "default",
                "v1",
                json!({"numeric": 2, "string": "string", "bool": false}),
            ),
        ],
        json!({"numeric": 2, "string": "string", "bool": false}),
        vec![(
            "default",
            "v1",
            vec![p(&[f("numeric")]), p(&[f("string")]), p(&[f("bool")])],
        )],
    );
}

#[test]
fn leaf_apply_update_apply_no_conflict() {
    let s = leaf_fields();
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"numeric": 1, "string": "string"})),
            Op::Update(
                "controller",
                "v2",
                json!({"numeric": 1, "string": "string", "bool": true}),
            ),
            Op::Apply("default", "v1", json!({"numeric": 2, "string": "string"})),
        ],
        json!({"numeric": 2, "string": "string", "bool": true}),
        vec![
            ("default", "v1", vec![p(&[f("numeric")]), p(&[f("string")])]),
            ("controller", "v2", vec![p(&[f("bool")])]),
        ],
    );
}

#[test]
fn leaf_apply_update_apply_with_conflict_then_force() {
    let s = leaf_fields();
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"numeric": 1, "string": "string"})),
            Op::Update(
                "controller",
                "v1",
                json!({"numeric": 1, "string": "controller string", "bool": true}),
            ),
            Op::Conflicts(
                "default",
                "v1",
                json!({"numeric": 2, "string": "user string"}),
                vec![("controller", ".string")],
            ),
            Op::Force(
                "default",
                "v1",
                json!({"numeric": 2, "string": "user string"}),
            ),
        ],
        json!({"numeric": 2, "string": "user string", "bool": true}),
        vec![
            ("default", "v1", vec![p(&[f("numeric")]), p(&[f("string")])]),
            ("controller", "v1", vec![p(&[f("bool")])]),
        ],
    );
}

#[test]
fn leaf_removals() {
    let s = leaf_fields();
    // apply_twice_remove
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "default",
                "v1",
                json!({"numeric": 1, "string": "string", "bool": false}),
            ),
            Op::Apply("default", "v2", json!({"string": "new string"})),
        ],
        json!({"string": "new string"}),
        vec![("default", "v2", vec![p(&[f("string")])])],
    );
    // update_apply_omits: the updater's value stays, and so does its ownership.
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"numeric": 2})),
            Op::Update("controller", "v1", json!({"numeric": 1})),
            Op::Apply("default", "v1", Value::Null),
        ],
        json!({"numeric": 1}),
        vec![("controller", "v1", vec![p(&[f("numeric")])])],
    );
    // update_remove_empty_set
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"string": "string"})),
            Op::Update("controller", "v1", json!({"string": "new string"})),
        ],
        json!({"string": "new string"}),
        vec![("controller", "v1", vec![p(&[f("string")])])],
    );
    // apply_remove_empty_set
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"string": "string"})),
            Op::Apply("default", "v1", Value::Null),
        ],
        Value::Null,
        vec![],
    );
}

fn sets() -> Schemas {
    Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "list": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}))
    .unwrap()
}

#[test]
fn set_apply_update_apply() {
    let s = sets();
    // apply_update_apply_with_overlap: "b" ends up shared, "d" stays the controller's.
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"list": ["a", "c"]})),
            Op::Update("controller", "v1", json!({"list": ["a", "b", "c", "d"]})),
            Op::Apply("default", "v1", json!({"list": ["a", "b", "c"]})),
        ],
        json!({"list": ["a", "b", "c", "d"]}),
        vec![
            (
                "default",
                "v1",
                ["a", "b", "c"]
                    .iter()
                    .map(|x| p(&[f("list"), v(x)]))
                    .collect(),
            ),
            (
                "controller",
                "v1",
                ["b", "d"].iter().map(|x| p(&[f("list"), v(x)])).collect(),
            ),
        ],
    );
    // apply_twice_reorder
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            Op::Apply("default", "v1", json!({"list": ["a", "d", "c", "b"]})),
        ],
        json!({"list": ["a", "d", "c", "b"]}),
        vec![(
            "default",
            "v1",
            ["a", "b", "c", "d"]
                .iter()
                .map(|x| p(&[f("list"), v(x)]))
                .collect(),
        )],
    );
    // apply_twice_remove
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            Op::Apply("default", "v1", json!({"list": ["a", "c", "e"]})),
        ],
        json!({"list": ["a", "c", "e"]}),
        vec![(
            "default",
            "v1",
            ["a", "c", "e"]
                .iter()
                .map(|x| p(&[f("list"), v(x)]))
                .collect(),
        )],
    );
}

fn associative_list() -> Schemas {
    Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "list": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "value": {"type": "number"}}}}}}))
    .unwrap()
}

#[test]
fn multiple_appliers_on_an_associative_list() {
    let s = associative_list();
    // remove_one_keep_one
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "apply-one",
                "v1",
                json!({"list": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
            ),
            Op::Apply(
                "apply-two",
                "v2",
                json!({"list": [{"name": "c"}, {"name": "d"}]}),
            ),
            Op::Apply("apply-one", "v3", json!({"list": [{"name": "a"}]})),
        ],
        json!({"list": [{"name": "a"}, {"name": "c"}, {"name": "d"}]}),
        vec![
            (
                "apply-one",
                "v3",
                vec![
                    p(&[f("list"), kn("a")]),
                    p(&[f("list"), kn("a"), f("name")]),
                ],
            ),
            (
                "apply-two",
                "v2",
                vec![
                    p(&[f("list"), kn("c")]),
                    p(&[f("list"), kn("d")]),
                    p(&[f("list"), kn("c"), f("name")]),
                    p(&[f("list"), kn("d"), f("name")]),
                ],
            ),
        ],
    );
    // same_value_no_conflict, then change_value_yes_conflict
    let same = json!({"list": [{"name": "a", "value": 0}]});
    let owned = vec![
        p(&[f("list"), kn("a")]),
        p(&[f("list"), kn("a"), f("name")]),
        p(&[f("list"), kn("a"), f("value")]),
    ];
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("apply-one", "v1", same.clone()),
            Op::Apply("apply-two", "v2", same.clone()),
        ],
        same.clone(),
        vec![
            ("apply-one", "v1", owned.clone()),
            ("apply-two", "v2", owned.clone()),
        ],
    );
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("apply-one", "v1", same.clone()),
            Op::Conflicts(
                "apply-two",
                "v2",
                json!({"list": [{"name": "a", "value": 1}]}),
                vec![("apply-one", ".list[name=\"a\"].value")],
            ),
        ],
        same,
        vec![("apply-one", "v1", owned)],
    );
    // removing_obsolete_applied_structs (key_test)
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "default",
                "v1",
                json!({"list": [{"name": "a", "value": 1}, {"name": "b", "value": 2}]}),
            ),
            Op::Apply(
                "default",
                "v1",
                json!({"list": [{"name": "a", "value": 2}, {"name": "c", "value": 3}]}),
            ),
        ],
        json!({"list": [{"name": "a", "value": 2}, {"name": "c", "value": 3}]}),
        vec![(
            "default",
            "v1",
            vec![
                p(&[f("list"), kn("a")]),
                p(&[f("list"), kn("c")]),
                p(&[f("list"), kn("a"), f("name")]),
                p(&[f("list"), kn("a"), f("value")]),
                p(&[f("list"), kn("c"), f("name")]),
                p(&[f("list"), kn("c"), f("value")]),
            ],
        )],
    );
}

fn nested() -> Schemas {
    let set =
        json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}});
    Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "listOfLists": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "value": set}}},
        "mapOfMaps": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {"type": "string"}}},
        "struct": {"type": "object", "properties": {
            "name": {"type": "string"}, "value": {"type": "number"}}},
    }}))
    .unwrap()
}

#[test]
fn nested_dangling_and_owned_subitems() {
    let s = nested();
    let a = || p(&[f("listOfLists"), kn("a")]);
    let a_name = || p(&[f("listOfLists"), kn("a"), f("name")]);
    // remove_one_keep_one_with_dangling_subitem
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "apply-one",
                "v1",
                json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
            ),
            Op::Apply(
                "apply-two",
                "v2",
                json!({"listOfLists": [{"name": "b", "value": ["d"]}]}),
            ),
            Op::Update(
                "controller",
                "v2",
                json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c", "d", "e"]}]}),
            ),
            Op::Apply("apply-one", "v3", json!({"listOfLists": [{"name": "a"}]})),
        ],
        json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["d", "e"]}]}),
        vec![
            ("apply-one", "v3", vec![a(), a_name()]),
            (
                "apply-two",
                "v2",
                vec![
                    p(&[f("listOfLists"), kn("b")]),
                    p(&[f("listOfLists"), kn("b"), f("name")]),
                    p(&[f("listOfLists"), kn("b"), f("value"), v("d")]),
                ],
            ),
            (
                "controller",
                "v2",
                vec![p(&[f("listOfLists"), kn("b"), f("value"), v("e")])],
            ),
        ],
    );
    // remove_one_with_dangling_subitem_keep_one
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "apply-one",
                "v1",
                json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
            ),
            Op::Apply(
                "apply-two",
                "v2",
                json!({"listOfLists": [{"name": "a", "value": ["b"]}]}),
            ),
            Op::Update(
                "controller",
                "v2",
                json!({"listOfLists": [{"name": "a", "value": ["b"]}, {"name": "b", "value": ["c", "d"]}]}),
            ),
            Op::Apply("apply-one", "v3", json!({"listOfLists": [{"name": "a"}]})),
        ],
        json!({"listOfLists": [{"name": "a", "value": ["b"]}]}),
        vec![
            ("apply-one", "v3", vec![a(), a_name()]),
            (
                "apply-two",
                "v2",
                vec![
                    a(),
                    a_name(),
                    p(&[f("listOfLists"), kn("a"), f("value"), v("b")]),
                ],
            ),
        ],
    );
}

#[test]
fn nested_structs_and_maps() {
    let s = nested();
    // struct_apply_remove_all
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "default",
                "v1",
                json!({"struct": {"name": "a", "value": 1}}),
            ),
            Op::Apply("default", "v1", Value::Null),
        ],
        Value::Null,
        vec![],
    );
    // struct_apply_update_remove_all: the controller's field stays.
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"struct": {"name": "a"}})),
            Op::Update(
                "controller",
                "v1",
                json!({"struct": {"name": "a", "value": 1}}),
            ),
            Op::Apply("default", "v1", Value::Null),
        ],
        json!({"struct": {"value": 1}}),
        vec![("controller", "v1", vec![p(&[f("struct"), f("value")])])],
    );
    // struct_apply_update_dict_null: a null struct in the config merges as "no change".
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"struct": {"name": "a"}})),
            Op::Update(
                "controller",
                "v1",
                json!({"struct": {"name": "a", "value": 1}}),
            ),
            Op::Apply("default", "v1", json!({"struct": null})),
        ],
        json!({"struct": {"value": 1}}),
        vec![
            ("default", "v1", vec![p(&[f("struct")])]),
            ("controller", "v1", vec![p(&[f("struct"), f("value")])]),
        ],
    );
    // struct_apply_update_took_over: the updater changed the name, so it is not removed.
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"struct": {"name": "a"}})),
            Op::Update(
                "controller",
                "v1",
                json!({"struct": {"name": "b", "value": 1}}),
            ),
            Op::Apply("default", "v1", json!({"struct": null})),
        ],
        json!({"struct": {"name": "b", "value": 1}}),
        vec![
            ("default", "v1", vec![p(&[f("struct")])]),
            (
                "controller",
                "v1",
                vec![p(&[f("struct"), f("name")]), p(&[f("struct"), f("value")])],
            ),
        ],
    );
    // mapOfMaps_change_key_and_value
    check(
        ty(&s),
        &none(),
        vec![
            Op::Apply(
                "default",
                "v1",
                json!({"mapOfMaps": {"a": {"b": "x", "c": "z"}}}),
            ),
            Op::Apply(
                "default",
                "v1",
                json!({"mapOfMaps": {"b": {"a": "x", "c": "z"}}}),
            ),
        ],
        json!({"mapOfMaps": {"b": {"a": "x", "c": "z"}}}),
        vec![(
            "default",
            "v1",
            vec![
                p(&[f("mapOfMaps"), f("b")]),
                p(&[f("mapOfMaps"), f("b"), f("a")]),
                p(&[f("mapOfMaps"), f("b"), f("c")]),
            ],
        )],
    );
}

#[test]
fn deduced_lists_are_atomic_and_maps_granular() {
    // apply_twice_list_is_atomic
    check(
        Ty::Deduced,
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"list": ["a", "c", "e"]})),
            Op::Apply("default", "v1", json!({"list": ["a", "b"]})),
        ],
        json!({"list": ["a", "b"]}),
        vec![("default", "v1", vec![p(&[f("list")])])],
    );
    // apply_update_apply_list: the updater took the whole list.
    check(
        Ty::Deduced,
        &none(),
        vec![
            Op::Apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            Op::Update(
                "controller",
                "v1",
                json!({"list": ["a", "b", "c", "aprime", "d"]}),
            ),
            Op::Conflicts(
                "default",
                "v1",
                json!({"list": ["a", "b", "c", "d"]}),
                vec![("controller", ".list")],
            ),
        ],
        json!({"list": ["a", "b", "c", "aprime", "d"]}),
        vec![("controller", "v1", vec![p(&[f("list")])])],
    );
    // apply_update_apply_nested
    let applied =
        json!({"a": 2, "b": {"c": {"d": 2, "e": [3, 2, 1], "f": [{"name": "n", "value": 1}]}}});
    check(
        Ty::Deduced,
        &none(),
        vec![
            Op::Apply(
                "default",
                "v1",
                json!({"a": 1, "b": {"c": {"d": 2, "e": [1, 2, 3], "f": [{"name": "n", "value": 1}]}}}),
            ),
            Op::Update(
                "controller",
                "v1",
                json!({"a": 1, "b": {"c": {"d": 3, "e": [1, 2, 3, 4], "f": [{"name": "n", "value": 2}]}}, "g": 5}),
            ),
            Op::Conflicts(
                "default",
                "v1",
                applied.clone(),
                vec![
                    ("controller", ".b.c.d"),
                    ("controller", ".b.c.e"),
                    ("controller", ".b.c.f"),
                ],
            ),
            Op::Force("default", "v1", applied),
        ],
        json!({"a": 2, "b": {"c": {"d": 2, "e": [3, 2, 1], "f": [{"name": "n", "value": 1}]}}, "g": 5}),
        vec![
            (
                "default",
                "v1",
                vec![
                    p(&[f("a")]),
                    p(&[f("b")]),
                    p(&[f("b"), f("c")]),
                    p(&[f("b"), f("c"), f("d")]),
                    p(&[f("b"), f("c"), f("e")]),
                    p(&[f("b"), f("c"), f("f")]),
                ],
            ),
            ("controller", "v1", vec![p(&[f("g")])]),
        ],
    );
}

#[test]
fn ignored_fields_are_never_owned_nor_conflict() {
    let ignored = FieldSet::from_paths([&[f("string")][..]]);
    check(
        Ty::Deduced,
        &ignored,
        vec![Op::Update(
            "default",
            "v1",
            json!({"numeric": 1, "string": "some string"}),
        )],
        json!({"numeric": 1, "string": "some string"}),
        vec![("default", "v1", vec![p(&[f("numeric")])])],
    );
    let deep = FieldSet::from_paths([&[f("obj")][..]]);
    check(
        Ty::Deduced,
        &deep,
        vec![Op::Apply(
            "default",
            "v1",
            json!({"numeric": 1, "obj": {"string": "foo", "numeric": 2}}),
        )],
        json!({"numeric": 1, "obj": {"string": "foo", "numeric": 2}}),
        vec![("default", "v1", vec![p(&[f("numeric")])])],
    );
    // update_does_not_steal_ignored / apply_does_not_steal_ignored
    check(
        Ty::Deduced,
        &ignored,
        vec![
            Op::Update("update-one", "v1", json!({"numeric": 1})),
            Op::Apply("apply-one", "v1", json!({"numeric": 1, "string": "x"})),
            Op::Update("update-two", "v1", json!({"numeric": 1, "string": "y"})),
        ],
        json!({"numeric": 1, "string": "y"}),
        vec![
            ("update-one", "v1", vec![p(&[f("numeric")])]),
            ("apply-one", "v1", vec![p(&[f("numeric")])]),
        ],
    );
}

#[test]
fn builtin_deployment_apply_conflicts_with_an_update_on_replicas() {
    let dep = crate::apply::typed::root_ty(Schemas::builtin().for_kind("apps", "v1", "Deployment"));
    let created = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    });
    let s = run(
        dep,
        &none(),
        vec![
            Op::Update("kube-controller-manager", "apps/v1", created),
            Op::Conflicts(
                "kubectl",
                "apps/v1",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                       "spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "c", "image": "j"}]}}}}),
                vec![
                    ("kube-controller-manager", ".spec.replicas"),
                    (
                        "kube-controller-manager",
                        ".spec.template.spec.containers[name=\"c\"].image",
                    ),
                ],
            ),
        ],
    );
    assert_eq!(s.live["spec"]["replicas"], json!(3));
}

#[test]
fn granular_to_atomic_schema_change_is_reconciled() {
    let granular = Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "struct": {"type": "object", "properties": {
            "numeric": {"type": "number"}, "string": {"type": "string"}}}}}))
    .unwrap();
    let atomic = Schemas::from_json_schema(&json!({"type": "object", "properties": {
        "struct": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
            "numeric": {"type": "number"}, "string": {"type": "string"}}}}}))
    .unwrap();
    let ignored = none();
    let mut s = run(
        ty(&granular),
        &ignored,
        vec![Op::Apply("one", "v1", json!({"struct": {"numeric": 1}}))],
    );
    let u = Updater {
        ty: ty(&atomic),
        ignored: &ignored,
    };
    let cfg = json!({"struct": {"string": "string"}});
    match apply_op(&u, &mut s, "two", "v1", &cfg, false) {
        Err(UpdateError::Conflicts(c)) => {
            assert_eq!(
                sorted_conflicts(&c),
                [("one".to_string(), ".struct".to_string())]
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    apply_op(&u, &mut s, "two", "v1", &cfg, true).unwrap();
    assert_eq!(s.live, cfg);
    assert_eq!(s.managers.keys().collect::<Vec<_>>(), ["two"]);
    assert_eq!(
        s.managers["two"].set,
        FieldSet::from_paths([&[f("struct")][..]])
    );
}
