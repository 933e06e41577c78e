//! The naming controller's decision (apiextensions' `NamingConditionController`): which of a
//! CRD's requested names it may have, given the names other CRDs of the same group already
//! hold, and the `NamesAccepted` and `Established` conditions that follow.

use serde_json::{Map, Value};

use super::json::{varr, vtext};
use crate::field::go_quote;
use crate::meta::At as _;

/// A CRD status condition as the naming controller computes it (`lastTransitionTime` is the
/// caller's to set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `NamesAccepted` or `Established`.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    /// The condition as JSON (without `lastTransitionTime`).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "type": self.type_,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
        })
    }
}

/// The outcome for one CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct NamesOutcome {
    /// The new `status.acceptedNames` (requested names that do not conflict; the previously
    /// accepted ones where they do).
    pub accepted_names: Value,
    /// `NamesAccepted`: `True`/`NoConflicts`, or `False` with the last conflict's reason
    /// (`PluralConflict`, `SingularConflict`, `ShortNamesConflict`, `KindConflict`,
    /// `ListKindConflict`) and message (`"foos" is already in use`).
    pub names_accepted: Condition,
    /// `Established` as the naming controller leaves it: kept when already `True`, else
    /// `False`/`Installing` once names are accepted, else `False`/`NotAccepted`.
    pub established: Condition,
}

impl NamesOutcome {
    /// The accepted names when every requested name was accepted, else the
    /// `(reason, message)` of the conflict.
    pub fn result(&self) -> Result<&Value, (&str, &str)> {
        if self.names_accepted.status == "True" {
            Ok(&self.accepted_names)
        } else {
            Err((&self.names_accepted.reason, &self.names_accepted.message))
        }
    }
}

fn name_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `equalToAcceptedOrFresh`.
fn fresh(requested: &str, accepted: &str, used: &[String]) -> Result<(), String> {
    if requested == accepted || !used.iter().any(|u| u == requested) {
        return Ok(());
    }
    Err(format!("{} is already in use", go_quote(requested)))
}

/// Compute the naming decision for `crd` given the CRDs stored (`others`; like Kubernetes'
/// lister, it may include `crd` itself: its own accepted names then count as in use, which
/// only matters when it asks to trade one accepted name for another).
pub fn accepted_names(crd: &Value, others: &[Value]) -> NamesOutcome {
    let group = crd.at("/spec/group").and_then(Value::as_str).unwrap_or("");
    let mut resources: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    for other in others {
        if other
            .at("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("")
            != group
        {
            continue;
        }
        let an = other.at("/status/acceptedNames");
        let s = |k: &str| {
            an.and_then(|a| a.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        resources.push(s("plural"));
        resources.push(s("singular"));
        resources.extend(name_list(an.and_then(|a| a.get("shortNames"))));
        kinds.push(s("kind"));
        kinds.push(s("listKind"));
    }
    let empty = Value::Object(Map::new());
    let requested = crd.at("/spec/names").unwrap_or(&empty);
    let accepted = crd.at("/status/acceptedNames").unwrap_or(&empty);
    let mut new_names = accepted.as_object().cloned().unwrap_or_default();
    let mut conflict: Option<(&str, String)> = None;

    let mut single = |field: &str,
                      used: &[String],
                      reason: &'static str,
                      conflict: &mut Option<(&str, String)>| {
        let (r, a) = (vtext(requested, field), vtext(accepted, field));
        match fresh(r, a, used) {
            Ok(()) => {
                new_names.insert(field.into(), Value::String(r.into()));
            }
            Err(e) => *conflict = Some((reason, e)),
        }
    };
    single("plural", &resources, "PluralConflict", &mut conflict);
    single("singular", &resources, "SingularConflict", &mut conflict);
    let (req_short, acc_short) = (requested.get("shortNames"), accepted.get("shortNames"));
    if name_list(req_short) != name_list(acc_short) || req_short.is_some() != acc_short.is_some() {
        let existing = name_list(acc_short);
        let errs: Vec<String> = name_list(req_short)
            .iter()
            .filter(|s| !existing.contains(s))
            .filter_map(|s| fresh(s, "", &resources).err())
            .collect();
        if errs.is_empty() {
            new_names.insert(
                "shortNames".into(),
                req_short.cloned().unwrap_or(Value::Null),
            );
            if req_short.is_none() {
                new_names.remove("shortNames");
            }
        } else {
            conflict = Some(("ShortNamesConflict", aggregate(&errs)));
        }
    }
    let mut single = |field: &str,
                      used: &[String],
                      reason: &'static str,
                      conflict: &mut Option<(&str, String)>| {
        let (r, a) = (vtext(requested, field), vtext(accepted, field));
        match fresh(r, a, used) {
            Ok(()) => {
                new_names.insert(field.into(), Value::String(r.into()));
            }
            Err(e) => *conflict = Some((reason, e)),
        }
    };
    single("kind", &kinds, "KindConflict", &mut conflict);
    single("listKind", &kinds, "ListKindConflict", &mut conflict);
    match requested.get("categories") {
        Some(c) => {
            new_names.insert("categories".into(), c.clone());
        }
        None => {
            new_names.remove("categories");
        }
    }

    let names_accepted = match conflict {
        Some((reason, message)) => Condition {
            type_: "NamesAccepted",
            status: "False".into(),
            reason: reason.into(),
            message,
        },
        None => Condition {
            type_: "NamesAccepted",
            status: "True".into(),
            reason: "NoConflicts".into(),
            message: "no conflicts found".into(),
        },
    };
    let old_established = varr(crd.get("status").unwrap_or(&Value::Null), "conditions")
        .iter()
        .find(|c| vtext(c, "type") == "Established")
        .map(|c| Condition {
            type_: "Established",
            status: vtext(c, "status").into(),
            reason: vtext(c, "reason").into(),
            message: vtext(c, "message").into(),
        });
    let mut established = old_established.unwrap_or(Condition {
        type_: "Established",
        status: "False".into(),
        reason: "NotAccepted".into(),
        message: "not all names are accepted".into(),
    });
    if established.status != "True" && names_accepted.status == "True" {
        established = Condition {
            type_: "Established",
            status: "False".into(),
            reason: "Installing".into(),
            message: "the initial names have been accepted".into(),
        };
    }
    NamesOutcome {
        accepted_names: Value::Object(new_names),
        names_accepted,
        established,
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message alone, several as `[a, b]`.
fn aggregate(errs: &[String]) -> String {
    let mut unique: Vec<&String> = Vec::new();
    for e in errs {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    if unique.len() == 1 {
        return unique[0].clone();
    }
    let joined: Vec<&str> = unique.iter().map(|s| s.as_str()).collect();
    format!("[{}]", joined.join(", "))
}
