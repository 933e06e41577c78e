//! Helpers every controller shares: controller references, adoption and release of dependents,
//! pods made from templates, pod readiness and availability, label selectors.

use std::collections::BTreeMap;

use capstan_api::selector::LabelSelector as Matcher;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The owner reference with `controller: true`, if any.
pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// The controller reference an owner puts on what it creates.
pub fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A label-selector matcher from a typed selector; `None` when the selector is invalid.
/// An empty selector matches everything (callers that must not select everything check
/// [`selects_nothing_or_everything`] first).
pub fn matcher(selector: &LabelSelector) -> Option<Matcher> {
    let v = serde_json::to_value(selector).ok()?;
    Matcher::from_json(&v).ok()
}

/// A matcher for a map selector (ReplicationController, Service): empty selects nothing.
pub fn map_matcher(selector: &BTreeMap<String, String>) -> Matcher {
    if selector.is_empty() {
        return Matcher::nothing();
    }
    let labels: serde_json::Map<String, serde_json::Value> = selector
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    Matcher::from_labels_map(&labels).unwrap_or_else(|_| Matcher::nothing())
}

/// Whether `m` selects an object with these labels.
pub fn matches(m: &Matcher, labels: Option<&BTreeMap<String, String>>) -> bool {
    m.matches_fn(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
}

/// Whether a typed selector is empty (selects everything).
pub fn selects_everything(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// A pod from a controller's template (Kubernetes' GetPodFromTemplate): the template's labels,
/// annotations, finalizers and spec; `generateName: <prefix>`; the controller reference.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    generate_name_prefix: &str,
    controller: OwnerReference,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name_prefix.to_string()),
            namespace: Some(namespace.to_string()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![controller]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// The generateName prefix Kubernetes uses for a controller's pods: `<name>-`, cut so the
/// generated name fits 63 characters.
pub fn pod_name_prefix(owner_name: &str) -> String {
    let mut prefix = format!("{owner_name}-");
    if prefix.len() > 58 {
        prefix.truncate(58);
    }
    prefix
}

/// Neither terminated nor being deleted (Kubernetes' IsPodActive).
pub fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded") | Some("Failed"))
        && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The pod's Ready condition is True.
pub fn is_pod_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// When the pod's Ready condition became True (`None`: not ready).
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if c.status != "True" {
        return None;
    }
    Some(
        c.last_transition_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
    )
}

/// Ready for at least `min_ready_seconds` at `now` (Kubernetes' IsPodAvailable).
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(t) => now.duration_since(t).as_secs() >= i64::from(min_ready_seconds),
    }
}

/// Adopt `child` for `owner`: add the controller reference, conditional on the child's uid.
pub async fn adopt<K>(api: &Api<K>, child: &K, controller: &OwnerReference) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {
        "ownerReferences": [controller],
        "uid": child.meta().uid,
    }});
    api.patch(
        child.meta().name.as_deref().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Strategic(&patch),
    )
    .await
}

/// Release `child` from the owner with `owner_uid`: remove that owner reference.
pub async fn release<K>(api: &Api<K>, child: &K, owner_uid: &str) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {
        "ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
        "uid": child.meta().uid,
    }});
    api.patch(
        child.meta().name.as_deref().unwrap_or_default(),
        &PatchParams::default(),
        &Patch::Strategic(&patch),
    )
    .await
}

/// Whether an API error is NotFound (the object is already gone).
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether an API error is a Conflict (stale resourceVersion or already exists).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// A Go duration string (`40s`, `1m30s`, `150ms`, `2h`); None when it is not one.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[u..];
        total += value * unit;
    }
    std::time::Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(phase: &str, ready_at: Option<Timestamp>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready_at.map(|t| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(t)),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let now = Timestamp::now();
        let p = pod("Running", Some(now - std::time::Duration::from_secs(5)));
        assert!(is_pod_ready(&p));
        assert!(is_pod_available(&p, 0, now));
        assert!(is_pod_available(&p, 5, now));
        assert!(!is_pod_available(&p, 10, now));
        assert!(!is_pod_available(&pod("Running", None), 0, now));
        assert!(!is_pod_active(&pod("Succeeded", None)));
        assert!(is_pod_active(&pod("Pending", None)));
    }

    #[test]
    fn map_selectors_select_nothing_when_empty() {
        let m = map_matcher(&BTreeMap::new());
        assert!(!matches(
            &m,
            Some(&BTreeMap::from([("a".into(), "b".into())]))
        ));
        let m = map_matcher(&BTreeMap::from([("a".into(), "b".into())]));
        assert!(matches(
            &m,
            Some(&BTreeMap::from([("a".into(), "b".into())]))
        ));
        assert!(!matches(&m, None));
    }
}
