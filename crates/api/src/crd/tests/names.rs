//! The naming controller's decision (`TestSync` in apiextensions' naming_controller_test.go).

use serde_json::{json, Value};

use crate::crd::accepted_names;

fn names(n: &[&str]) -> Value {
    let mut v = json!({"plural": n[0], "singular": n[1], "kind": n[2], "listKind": n[3]});
    if n.len() > 4 {
        v["shortNames"] = json!(n[4..]);
    }
    v
}

fn new_crd(name: &str) -> Value {
    let (plural, group) = name.split_once('.').unwrap();
    json!({"metadata": {"name": name}, "spec": {"group": group, "names": {"plural": plural}}, "status": {}})
}

fn with_spec(mut c: Value, n: &[&str]) -> Value {
    c["spec"]["names"] = names(n);
    c
}

fn with_status(mut c: Value, n: &[&str]) -> Value {
    c["status"]["acceptedNames"] = names(n);
    c
}

/// The accepted names as (plural, singular, kind, listKind, shortNames), missing as "".
fn flat(v: &Value) -> (String, String, String, String, Vec<String>) {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let short = v
        .get("shortNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    (s("plural"), s("singular"), s("kind"), s("listKind"), short)
}

const FULL: &[&str] = &[
    "alfa",
    "delta-singular",
    "echo-kind",
    "foxtrot-listkind",
    "golf-shortname-1",
    "hotel-shortname-2",
];

fn case(
    name: &str,
    input: Value,
    existing: Vec<Value>,
    expected: &[&str],
    conflict: Option<(&str, &str)>,
) {
    let out = accepted_names(&input, &existing);
    assert_eq!(flat(&out.accepted_names), flat(&names(expected)), "{name}");
    match conflict {
        None => {
            assert_eq!(
                (
                    out.names_accepted.status.as_str(),
                    out.names_accepted.reason.as_str(),
                    out.names_accepted.message.as_str()
                ),
                ("True", "NoConflicts", "no conflicts found"),
                "{name}"
            );
            assert_eq!(
                (
                    out.established.status.as_str(),
                    out.established.reason.as_str(),
                    out.established.message.as_str()
                ),
                (
                    "False",
                    "Installing",
                    "the initial names have been accepted"
                ),
                "{name}"
            );
            assert!(out.result().is_ok());
        }
        Some((reason, message)) => {
            assert_eq!(
                (
                    out.names_accepted.status.as_str(),
                    out.names_accepted.reason.as_str(),
                    out.names_accepted.message.as_str()
                ),
                ("False", reason, message),
                "{name}"
            );
            assert_eq!(
                (
                    out.established.status.as_str(),
                    out.established.reason.as_str(),
                    out.established.message.as_str()
                ),
                ("False", "NotAccepted", "not all names are accepted"),
                "{name}"
            );
            assert_eq!(out.result().unwrap_err(), (reason, message));
        }
    }
}

#[test]
fn naming_decisions_follow_the_naming_controller() {
    case(
        "first resource",
        new_crd("alfa.bravo.com"),
        vec![],
        &["alfa", "", "", ""],
        None,
    );
    case(
        "different groups",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(new_crd("alfa.charlie.com"), FULL)],
        FULL,
        None,
    );
    case(
        "conflict plural to singular",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "alfa", "", ""],
        )],
        &[
            "",
            "delta-singular",
            "echo-kind",
            "foxtrot-listkind",
            "golf-shortname-1",
            "hotel-shortname-2",
        ],
        Some(("PluralConflict", "\"alfa\" is already in use")),
    );
    case(
        "conflict singular to shortName",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "indias", "", "", "delta-singular"],
        )],
        &[
            "alfa",
            "",
            "echo-kind",
            "foxtrot-listkind",
            "golf-shortname-1",
            "hotel-shortname-2",
        ],
        Some(("SingularConflict", "\"delta-singular\" is already in use")),
    );
    case(
        "conflict on shortName to shortName",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "indias", "", "", "hotel-shortname-2"],
        )],
        &["alfa", "delta-singular", "echo-kind", "foxtrot-listkind"],
        Some((
            "ShortNamesConflict",
            "\"hotel-shortname-2\" is already in use",
        )),
    );
    case(
        "conflict on kind to listkind",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "indias", "", "echo-kind"],
        )],
        &[
            "alfa",
            "delta-singular",
            "",
            "foxtrot-listkind",
            "golf-shortname-1",
            "hotel-shortname-2",
        ],
        Some(("KindConflict", "\"echo-kind\" is already in use")),
    );
    case(
        "no conflict on resource and kind",
        with_spec(new_crd("alfa.bravo.com"), FULL),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "echo-kind", "", ""],
        )],
        FULL,
        None,
    );
    let merging = with_status(
        with_spec(new_crd("alfa.bravo.com"), FULL),
        &[
            "zulu",
            "yankee-singular",
            "xray-kind",
            "whiskey-listkind",
            "victor-shortname-1",
            "uniform-shortname-2",
        ],
    );
    case(
        "merge on conflicts",
        merging.clone(),
        vec![with_status(
            new_crd("india.bravo.com"),
            &["india", "indias", "foxtrot-listkind", "", "delta-singular"],
        )],
        &[
            "alfa",
            "yankee-singular",
            "echo-kind",
            "whiskey-listkind",
            "golf-shortname-1",
            "hotel-shortname-2",
        ],
        Some(("ListKindConflict", "\"foxtrot-listkind\" is already in use")),
    );
    case(
        "merge on conflicts shortNames as one",
        merging,
        vec![with_status(
            new_crd("india.bravo.com"),
            &[
                "india",
                "indias",
                "foxtrot-listkind",
                "",
                "delta-singular",
                "golf-shortname-1",
            ],
        )],
        &[
            "alfa",
            "yankee-singular",
            "echo-kind",
            "whiskey-listkind",
            "victor-shortname-1",
            "uniform-shortname-2",
        ],
        Some(("ListKindConflict", "\"foxtrot-listkind\" is already in use")),
    );
    let me = with_status(with_spec(new_crd("alfa.bravo.com"), FULL), FULL);
    case(
        "no conflicts on self",
        me.clone(),
        vec![me.clone()],
        FULL,
        None,
    );
    case(
        "no conflicts on self, remove shortname",
        with_status(with_spec(new_crd("alfa.bravo.com"), &FULL[..5]), FULL),
        vec![me],
        &FULL[..5],
        None,
    );
    let mut established = with_spec(new_crd("alfa.bravo.com"), FULL);
    established["status"]["conditions"] = json!([{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}]);
    let out = accepted_names(&established, &[]);
    assert_eq!(
        out.established.status, "True",
        "an established CRD stays established"
    );
    assert_eq!(out.established.reason, "InitialNamesAccepted");
    // Several short names in use: an aggregate message.
    let out = accepted_names(
        &with_spec(new_crd("alfa.bravo.com"), FULL),
        &[with_status(
            new_crd("india.bravo.com"),
            &[
                "india",
                "indias",
                "",
                "",
                "golf-shortname-1",
                "hotel-shortname-2",
            ],
        )],
    );
    assert_eq!(
        out.names_accepted.message,
        "[\"golf-shortname-1\" is already in use, \"hotel-shortname-2\" is already in use]"
    );
}
