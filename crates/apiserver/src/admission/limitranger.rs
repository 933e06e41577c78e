//! LimitRanger, as Kubernetes' `plugin/pkg/admission/limitranger`: on pod create, containers
//! missing requests or limits get the defaults of the namespace's Container-type LimitRanges
//! (recorded in the `kubernetes.io/limit-ranger` annotation); then pods and
//! PersistentVolumeClaims are checked against every LimitRange's min, max and
//! maxLimitRequestRatio.

use async_trait::async_trait;
use capstan_api::validation::quantity::Quantity;
use serde_json::{Map, Value};

use super::builtin::{
    aggregate, forbidden, is_core, items, pod_limits, pod_requests, resource_list, str_at,
    ResourceList,
};
use super::{Attributes, Operation, Plugin};
use crate::error::ApiResult;
use capstan_api::meta::At as _;

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The LimitRanger admission plugin.
pub struct LimitRanger;

/// What a request is, as far as LimitRanger cares.
#[derive(PartialEq)]
enum Target {
    Pod,
    Claim,
}

/// Kubernetes' `SupportsAttributes` plus the skip of objects being deleted: pod creates and
/// claim creates/updates, never subresources (pod resources cannot change on update).
fn target(a: &Attributes<'_>, old: Option<&Value>) -> Option<Target> {
    if !a.subresource.is_empty() || !matches!(a.operation, Operation::Create | Operation::Update) {
        return None;
    }
    if old.is_some_and(|o| capstan_api::meta::deletion_timestamp(o).is_some()) {
        return None;
    }
    if is_core(a, "pods") && a.operation == Operation::Create {
        Some(Target::Pod)
    } else if is_core(a, "persistentvolumeclaims") {
        Some(Target::Claim)
    } else {
        None
    }
}

#[async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let (Some(Target::Pod), Some(pod)) = (target(a, old), obj) else {
            return Ok(());
        };
        for range in a.objects.list("", "limitranges", a.namespace) {
            apply_defaults(&range, pod);
        }
        Ok(())
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let (Some(t), Some(obj)) = (target(a, old), obj) else {
            return Ok(());
        };
        for range in a.objects.list("", "limitranges", a.namespace) {
            let errs = match t {
                Target::Pod => pod_violations(&range, obj),
                Target::Claim => claim_violations(&range, obj),
            };
            if !errs.is_empty() {
                return Err(forbidden(a, Some(obj), aggregate(&errs)));
            }
        }
        Ok(())
    }
}

/// The range's `spec.limits` items of one type.
fn limits_of<'a>(range: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> {
    items(range, "/spec/limits")
        .iter()
        .filter(move |l| str_at(l, "/type") == kind)
}

fn raw_list<'a>(v: &'a Value, pointer: &str) -> Option<&'a Map<String, Value>> {
    v.at(pointer).and_then(Value::as_object)
}

/// Merge the range's Container defaults into every container and init container that lacks
/// them, annotating the pod with what was set (`defaultContainerResourceRequirements` +
/// `mergePodResourceRequirements`).
pub fn apply_defaults(range: &Value, pod: &mut Value) {
    let mut limits = Map::new();
    let mut requests = Map::new();
    for l in limits_of(range, "Container") {
        if let Some(m) = raw_list(l, "/defaultRequest") {
            requests.extend(m.clone());
        }
        if let Some(m) = raw_list(l, "/default") {
            limits.extend(m.clone());
        }
    }
    if limits.is_empty() && requests.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (key, prefix) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(list) = pod
            .pointer_mut(&format!("/spec/{key}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in list.iter_mut().filter(|c| c.is_object()) {
            let name = str_at(c, "/name").to_string();
            let set_requests = merge_missing(c, "requests", &requests);
            let set_limits = merge_missing(c, "limits", &limits);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {prefix} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!(
                    "{} limit for {prefix} {name}",
                    set_limits.join(", ")
                ));
            }
        }
    }
    if !notes.is_empty() {
        let md = capstan_api::meta::metadata_mut(pod);
        let ann = md
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !ann.is_object() {
            *ann = Value::Object(Map::new());
        }
        ann[ANNOTATION] = Value::String(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

/// Set each default the container's `resources.<field>` lacks; returns the names set, sorted.
fn merge_missing(c: &mut Value, field: &str, defaults: &Map<String, Value>) -> Vec<String> {
    if defaults.is_empty() {
        return Vec::new();
    }
    let c = c.as_object_mut().expect("checked");
    let res = c
        .entry("resources")
        .or_insert_with(|| Value::Object(Map::new()));
    if !res.is_object() {
        *res = Value::Object(Map::new());
    }
    let list = res
        .as_object_mut()
        .expect("object")
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !list.is_object() {
        *list = Value::Object(Map::new());
    }
    let list = list.as_object_mut().expect("object");
    let mut set = Vec::new();
    for (k, v) in defaults {
        if !list.contains_key(k) {
            list.insert(k.clone(), v.clone());
            set.push(k.clone());
        }
    }
    set
}

/// Compare at milli precision, as Kubernetes' `requestLimitEnforcedValues` does.
fn milli(q: Option<&Quantity>) -> i128 {
    q.map(Quantity::milli).unwrap_or(0)
}

fn show(q: Option<&Quantity>) -> String {
    q.map(Quantity::canonical).unwrap_or_else(|| "0".into())
}

fn min_violation(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    request: &ResourceList,
    limit: &ResourceList,
) -> Option<String> {
    let (req, lim) = (request.get(res), limit.get(res));
    let e = enforced.canonical();
    if req.is_none() {
        return Some(format!(
            "minimum {res} usage per {kind} is {e}.  No request is specified"
        ));
    }
    if milli(req) < enforced.milli() {
        return Some(format!(
            "minimum {res} usage per {kind} is {e}, but request is {}",
            show(req)
        ));
    }
    if lim.is_some() && milli(lim) < enforced.milli() {
        return Some(format!(
            "minimum {res} usage per {kind} is {e}, but limit is {}",
            show(lim)
        ));
    }
    None
}

fn max_violation(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    request: &ResourceList,
    limit: &ResourceList,
) -> Option<String> {
    let (req, lim) = (request.get(res), limit.get(res));
    let e = enforced.canonical();
    if lim.is_none() {
        return Some(format!(
            "maximum {res} usage per {kind} is {e}.  No limit is specified"
        ));
    }
    if milli(lim) > enforced.milli() {
        return Some(format!(
            "maximum {res} usage per {kind} is {e}, but limit is {}",
            show(lim)
        ));
    }
    if req.is_some() && milli(req) > enforced.milli() {
        return Some(format!(
            "maximum {res} usage per {kind} is {e}, but request is {}",
            show(req)
        ));
    }
    None
}

/// Max against requests only (claims have no limits).
fn max_request_violation(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    request: &ResourceList,
) -> Option<String> {
    let req = request.get(res);
    let e = enforced.canonical();
    match req {
        None => Some(format!(
            "maximum {res} usage per {kind} is {e}.  No request is specified"
        )),
        Some(r) if r.milli() > enforced.milli() => Some(format!(
            "maximum {res} usage per {kind} is {e}, but request is {}",
            r.canonical()
        )),
        _ => None,
    }
}

fn ratio_violation(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    request: &ResourceList,
    limit: &ResourceList,
) -> Option<String> {
    let (req, lim) = (milli(request.get(res)), milli(limit.get(res)));
    let e = enforced.canonical();
    if req == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {e}, but no request is specified or request is 0"
        ));
    }
    if lim == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {e}, but no limit is specified or limit is 0"
        ));
    }
    let ratio = lim as f64 / req as f64;
    if ratio * 1000.0 > enforced.milli() as f64 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {e}, but provided ratio is {ratio:.6}"
        ));
    }
    None
}

/// Every min/max/ratio of one limit item against a request/limit pair.
fn item_violations(
    item: &Value,
    kind: &str,
    request: &ResourceList,
    limit: &ResourceList,
    out: &mut Vec<String>,
) {
    for (res, q) in resource_list(item.at("/min")) {
        out.extend(min_violation(kind, &res, &q, request, limit));
    }
    for (res, q) in resource_list(item.at("/max")) {
        out.extend(max_violation(kind, &res, &q, request, limit));
    }
    for (res, q) in resource_list(item.at("/maxLimitRequestRatio")) {
        out.extend(ratio_violation(kind, &res, &q, request, limit));
    }
}

/// `PodValidateLimitFunc`: Container items against each container and init container, Pod
/// items against the pod's aggregate requests and limits (without overhead).
pub fn pod_violations(range: &Value, pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for item in items(range, "/spec/limits") {
        match str_at(item, "/type") {
            "Container" => {
                for key in ["/spec/containers", "/spec/initContainers"] {
                    for c in items(pod, key) {
                        let request = resource_list(c.at("/resources/requests"));
                        let limit = resource_list(c.at("/resources/limits"));
                        item_violations(item, "Container", &request, &limit, &mut out);
                    }
                }
            }
            "Pod" => {
                let request = pod_requests(pod, false);
                let limit = pod_limits(pod, false);
                item_violations(item, "Pod", &request, &limit, &mut out);
            }
            _ => {}
        }
    }
    out
}

/// `PersistentVolumeClaimValidateLimitFunc`: min and max against the claim's requests.
pub fn claim_violations(range: &Value, claim: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let request = resource_list(claim.at("/spec/resources/requests"));
    for item in limits_of(range, "PersistentVolumeClaim") {
        for (res, q) in resource_list(item.at("/min")) {
            out.extend(min_violation(
                "PersistentVolumeClaim",
                &res,
                &q,
                &request,
                &ResourceList::new(),
            ));
        }
        for (res, q) in resource_list(item.at("/max")) {
            out.extend(max_request_violation(
                "PersistentVolumeClaim",
                &res,
                &q,
                &request,
            ));
        }
    }
    out
}
