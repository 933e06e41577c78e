//! ObjectMeta, labels, annotations and label selectors (apimachinery's `ValidateObjectMeta`,
//! `ValidateLabels`, `ValidateAnnotations`, `ValidateLabelSelector`).

use serde_json::{Map, Value};

use super::{child, gofmt, idx, names, s, Errs, NameFn};
use crate::field::FieldError;

/// Total size of keys and values of annotations.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

fn str_val(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `ValidateLabelName`: a qualified name.
pub fn label_name(errs: &mut Errs, key: &str, path: &str) {
    for msg in names::qualified_name(key) {
        errs.push(FieldError::invalid(path, &Value::String(key.into()), &msg));
    }
}

/// `ValidateLabels` on a `map[string]string` (labels, selectors, nodeSelector).
pub fn labels(errs: &mut Errs, map: Option<&Value>, path: &str) {
    let Some(map) = map.and_then(Value::as_object) else {
        return;
    };
    for (k, v) in map {
        label_name(errs, k, path);
        let v = str_val(v);
        for msg in names::label_value(&v) {
            errs.push(FieldError::invalid(path, &Value::String(v.clone()), &msg));
        }
    }
}

/// `ValidateAnnotations`: qualified keys (lower-cased) and a 256KiB total.
pub fn annotations(errs: &mut Errs, map: Option<&Value>, path: &str) {
    let Some(map) = map.and_then(Value::as_object) else {
        return;
    };
    let mut total = 0usize;
    for (k, v) in map {
        for msg in names::qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, &Value::String(k.clone()), &msg));
        }
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn owner_references(errs: &mut Errs, md: &Map<String, Value>, path: &str) {
    let Some(refs) = md.get("ownerReferences").and_then(Value::as_array) else {
        return;
    };
    let mut first_controller = String::new();
    for r in refs {
        let api_version = s(r, "apiVersion");
        let kind = s(r, "kind");
        let version = api_version.rsplit('/').next().unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if version.is_empty() {
            errs.push(FieldError::invalid(
                child(path, "apiVersion"),
                &Value::String(api_version.into()),
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                child(path, "kind"),
                &Value::String(String::new()),
                "kind must not be empty",
            ));
        }
        if s(r, "name").is_empty() {
            errs.push(FieldError::invalid(
                child(path, "name"),
                &Value::String(String::new()),
                "name must not be empty",
            ));
        }
        if s(r, "uid").is_empty() {
            errs.push(FieldError::invalid(
                child(path, "uid"),
                &Value::String(String::new()),
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid_shown(
                path,
                "v1.OwnerReference{...}",
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let name = format!("{kind}/{}", s(r, "name"));
            if first_controller.is_empty() {
                first_controller = name;
            } else {
                errs.push(FieldError::invalid_shown(
                    path,
                    "[]v1.OwnerReference{...}",
                    &format!("Only one reference can have Controller set to true. Found \"true\" in references for {first_controller} and {name}"),
                ));
            }
        }
    }
}

fn finalizers(errs: &mut Errs, md: &Map<String, Value>, path: &str) {
    let Some(list) = md.get("finalizers").and_then(Value::as_array) else {
        return;
    };
    let (mut orphan, mut foreground) = (false, false);
    for f in list {
        let f = f.as_str().unwrap_or("");
        for msg in names::qualified_name(f) {
            errs.push(FieldError::invalid(path, &Value::String(f.into()), &msg));
        }
        orphan |= f == "orphan";
        foreground |= f == "foregroundDeletion";
    }
    if orphan && foreground {
        errs.push(FieldError::invalid_shown(
            path,
            &gofmt::string_slice(md.get("finalizers")),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    for (i, f) in list.iter().enumerate() {
        kube_finalizer_name(errs, f.as_str().unwrap_or(""), &idx(path, i));
    }
}

/// Finalizers without a `/` must be one of Kubernetes' standard names.
pub fn kube_finalizer_name(errs: &mut Errs, f: &str, path: &str) {
    if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
        errs.push(FieldError::invalid(
            path,
            &Value::String(f.into()),
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
}

/// `ValidateObjectMeta` on create: name (or generateName), namespace, labels, annotations,
/// owner references and finalizers.
pub fn object_meta(
    errs: &mut Errs,
    meta: Option<&Value>,
    namespaced: bool,
    name_fn: NameFn,
    path: &str,
) {
    let empty = Map::new();
    let md = meta.and_then(Value::as_object).unwrap_or(&empty);
    let get = |k: &str| md.get(k).and_then(Value::as_str).unwrap_or("");
    let generate = get("generateName");
    if !generate.is_empty() {
        for msg in name_fn(generate, true) {
            errs.push(FieldError::invalid(
                child(path, "generateName"),
                &Value::String(generate.into()),
                &msg,
            ));
        }
    }
    let name = get("name");
    if name.is_empty() {
        errs.push(FieldError::required(
            child(path, "name"),
            "name or generateName is required",
        ));
    } else {
        for msg in name_fn(name, false) {
            errs.push(FieldError::invalid(
                child(path, "name"),
                &Value::String(name.into()),
                &msg,
            ));
        }
    }
    let ns = get("namespace");
    if namespaced {
        if ns.is_empty() {
            errs.push(FieldError::required(child(path, "namespace"), ""));
        } else {
            for msg in names::name_is_dns_label(ns, false) {
                errs.push(FieldError::invalid(
                    child(path, "namespace"),
                    &Value::String(ns.into()),
                    &msg,
                ));
            }
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden(
            child(path, "namespace"),
            "not allowed on this type",
        ));
    }
    if let Some(g) = md.get("generation").and_then(Value::as_i64) {
        if g < 0 {
            errs.push(FieldError::invalid(
                child(path, "generation"),
                &Value::from(g),
                "must be greater than or equal to 0",
            ));
        }
    }
    labels(errs, md.get("labels"), &child(path, "labels"));
    annotations(errs, md.get("annotations"), &child(path, "annotations"));
    owner_references(errs, md, &child(path, "ownerReferences"));
    finalizers(errs, md, &child(path, "finalizers"));
}

/// `ValidateObjectMetaUpdate`: identity fields are immutable, finalizers may not be added
/// while deleting, generation may not go down; labels etc. are checked again.
pub fn object_meta_update(errs: &mut Errs, new: Option<&Value>, old: Option<&Value>, path: &str) {
    let empty = Map::new();
    let nm = new.and_then(Value::as_object).unwrap_or(&empty);
    let om = old.and_then(Value::as_object).unwrap_or(&empty);
    let get = |m: &Map<String, Value>, k: &str| {
        m.get(k).and_then(Value::as_str).unwrap_or("").to_string()
    };
    if om.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        let old_f: Vec<&str> = om
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut extra: Vec<&str> = nm
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .filter(|f| !old_f.contains(f))
                    .collect()
            })
            .unwrap_or_default();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let shown: Vec<String> = extra.iter().map(|f| crate::field::go_quote(f)).collect();
            errs.push(FieldError::forbidden(
                child(path, "finalizers"),
                &format!("no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}", shown.join(", ")),
            ));
        }
    }
    let ng = nm.get("generation").and_then(Value::as_i64).unwrap_or(0);
    let og = om.get("generation").and_then(Value::as_i64).unwrap_or(0);
    if ng < og {
        errs.push(FieldError::invalid(
            child(path, "generation"),
            &Value::from(ng),
            "must not be decremented",
        ));
    }
    for f in ["name", "namespace", "uid"] {
        let (n, o) = (get(nm, f), get(om, f));
        if n != o {
            errs.push(FieldError::immutable_shown(
                child(path, f),
                &crate::field::go_quote(&n),
            ));
        }
    }
    for f in ["creationTimestamp", "deletionTimestamp"] {
        let (n, o) = (
            nm.get(f).filter(|v| !v.is_null()),
            om.get(f).filter(|v| !v.is_null()),
        );
        if n != o && !(f == "creationTimestamp" && n.is_none()) {
            errs.push(FieldError::immutable_shown(child(path, f), &gofmt::time(n)));
        }
    }
    let (n, o) = (
        nm.get("deletionGracePeriodSeconds"),
        om.get("deletionGracePeriodSeconds"),
    );
    if n.filter(|v| !v.is_null()) != o.filter(|v| !v.is_null()) {
        let shown = n
            .and_then(Value::as_i64)
            .map_or("\"null\"".to_string(), |v| v.to_string());
        errs.push(FieldError::immutable_shown(
            child(path, "deletionGracePeriodSeconds"),
            &shown,
        ));
    }
    labels(errs, nm.get("labels"), &child(path, "labels"));
    annotations(errs, nm.get("annotations"), &child(path, "annotations"));
    owner_references(errs, nm, &child(path, "ownerReferences"));
    if let Some(list) = nm.get("finalizers").and_then(Value::as_array) {
        for (i, f) in list.iter().enumerate() {
            kube_finalizer_name(
                errs,
                f.as_str().unwrap_or(""),
                &idx(&child(path, "finalizers"), i),
            );
        }
    }
}

/// `ValidateLabelSelector` (metav1): matchLabels as labels, each requirement's operator, key
/// and values.
pub fn label_selector(errs: &mut Errs, sel: Option<&Value>, path: &str) {
    let Some(sel) = sel.filter(|v| v.is_object()) else {
        return;
    };
    labels(errs, sel.get("matchLabels"), &child(path, "matchLabels"));
    for (i, req) in super::arr(sel, "matchExpressions").iter().enumerate() {
        let rp = idx(&child(path, "matchExpressions"), i);
        let values = super::arr(req, "values");
        match s(req, "operator") {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        child(&rp, "values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        child(&rp, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            op => errs.push(FieldError::invalid(
                child(&rp, "operator"),
                &Value::String(op.into()),
                "not a valid selector operator",
            )),
        }
        label_name(errs, s(req, "key"), &child(&rp, "key"));
        for (j, v) in values.iter().enumerate() {
            let v = str_val(v);
            for msg in names::label_value(&v) {
                errs.push(FieldError::invalid(
                    idx(&child(&rp, "values"), j),
                    &Value::String(v.clone()),
                    &msg,
                ));
            }
        }
    }
}

/// Whether a label selector has neither matchLabels nor matchExpressions.
pub fn selector_is_empty(sel: &Value) -> bool {
    sel.get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
        && super::arr(sel, "matchExpressions").is_empty()
}

/// Whether a selector converts to a labels.Selector (known operators, values present).
pub fn selector_is_convertible(sel: &Value) -> bool {
    super::arr(sel, "matchExpressions").iter().all(|r| {
        let n = super::arr(r, "values").len();
        match s(r, "operator") {
            "In" | "NotIn" => n > 0,
            "Exists" | "DoesNotExist" => n == 0,
            _ => false,
        }
    })
}

/// Whether `labels` satisfy a metav1.LabelSelector (an empty selector matches everything).
pub fn selector_matches(sel: &Value, labels: Option<&Value>) -> bool {
    let empty = Map::new();
    let labels = labels.and_then(Value::as_object).unwrap_or(&empty);
    let get = |k: &str| labels.get(k).map(str_val);
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            if get(k) != Some(str_val(v)) {
                return false;
            }
        }
    }
    super::arr(sel, "matchExpressions").iter().all(|r| {
        let key = s(r, "key");
        let values: Vec<String> = super::arr(r, "values").iter().map(str_val).collect();
        match s(r, "operator") {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        }
    })
}

/// Whether a `map[string]string` selector (Services, RCs) matches the labels.
pub fn map_selector_matches(sel: &Map<String, Value>, labels: Option<&Value>) -> bool {
    let empty = Map::new();
    let labels = labels.and_then(Value::as_object).unwrap_or(&empty);
    sel.iter()
        .all(|(k, v)| labels.get(k).map(str_val) == Some(str_val(v)))
}
