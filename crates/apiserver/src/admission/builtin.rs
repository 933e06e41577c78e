//! The built-in admission plugins in Kubernetes' recommended order (`AllOrderedPlugins`), and
//! what they share: Kubernetes' `admission.NewForbidden`, walks over a pod's containers and
//! the objects it references, and resource-list arithmetic on quantities.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::sync::Arc;

use capstan_api::validation::quantity::{self, Format, Quantity};
use serde_json::{json, Map, Value};

use super::limitranger::LimitRanger;
use super::noderestriction::NodeRestriction;
use super::podsecurity::PodSecurity;
use super::priority::Priority;
use super::resourcequota::ResourceQuota;
use super::serviceaccount::ServiceAccount;
use super::taints::TaintNodesByCondition;
use super::tolerations::DefaultTolerationSeconds;
use super::{Attributes, Plugin};
use crate::error::ApiError;
use capstan_api::meta::At as _;

/// The built-in plugins, in the order Kubernetes runs them. (The chain runs every mutating
/// phase before any validating phase, as Kubernetes does.)
pub fn builtin_plugins() -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(LimitRanger),
        Arc::new(ServiceAccount::default()),
        Arc::new(NodeRestriction),
        Arc::new(TaintNodesByCondition),
        Arc::new(PodSecurity),
        Arc::new(Priority),
        Arc::new(DefaultTolerationSeconds),
        Arc::new(ResourceQuota),
    ]
}

/// The annotation that marks a kubelet's mirror of a static pod.
pub(crate) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Whether the request is for the core-group resource `plural`.
pub(crate) fn is_core(a: &Attributes<'_>, plural: &str) -> bool {
    a.info.group.is_empty() && a.info.plural == plural
}

/// Kubernetes' `admission.NewForbidden`: 403 `<resource> "<name>" is forbidden: <reason>`.
pub(crate) fn forbidden(a: &Attributes<'_>, obj: Option<&Value>, reason: impl Display) -> ApiError {
    forbidden_named(a.info.group, a.info.plural, &target_name(a, obj), reason)
}

/// How admission errors name the object: the request's name, else the object's name or
/// generateName (not generated yet on create), else "Unknown".
pub(crate) fn target_name(a: &Attributes<'_>, obj: Option<&Value>) -> String {
    if !a.name.is_empty() {
        return a.name.to_string();
    }
    obj.map(|o| {
        let name = capstan_api::meta::name(o);
        if name.is_empty() {
            capstan_api::meta::meta_str(o, "generateName")
        } else {
            name
        }
    })
    .filter(|n| !n.is_empty())
    .unwrap_or("Unknown")
    .to_string()
}

/// `apierrors.NewForbidden` for a group/resource and name.
pub(crate) fn forbidden_named(
    group: &str,
    plural: &str,
    name: &str,
    reason: impl Display,
) -> ApiError {
    let resource = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    };
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {reason}")
    } else {
        format!("{resource} \"{name}\" is forbidden: {reason}")
    };
    let mut e = ApiError::new(403, "Forbidden", message);
    let mut details = json!({"name": name, "kind": plural});
    if !group.is_empty() {
        details["group"] = Value::String(group.to_string());
    }
    e.details = Some(details);
    e
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is, several de-duplicated in
/// brackets.
pub(crate) fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        1 => seen[0].to_string(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The array at a JSON pointer (empty when missing).
pub(crate) fn items<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.at(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The string at a JSON pointer ("" when missing).
pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.at(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A metadata annotation.
pub(crate) fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.at("/metadata/annotations")?.get(key)?.as_str()
}

pub(crate) fn is_mirror_pod(pod: &Value) -> bool {
    annotation(pod, MIRROR_POD_ANNOTATION).is_some()
}

/// A pod's containers in Kubernetes' `AllContainers` order: init, regular, ephemeral.
pub(crate) fn all_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| items(pod, &format!("/spec/{k}")))
}

/// The secrets a pod references (Kubernetes' `VisitPodSecretNames` over all containers):
/// image pull secrets, env and envFrom of every container, and volume sources.
pub(crate) fn pod_secret_names(pod: &Value) -> Vec<String> {
    let mut out: Vec<String> = items(pod, "/spec/imagePullSecrets")
        .iter()
        .map(|r| str_at(r, "/name").to_string())
        .collect();
    for c in all_containers(pod) {
        for e in items(c, "/envFrom") {
            if let Some(n) = e.at("/secretRef/name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
        for e in items(c, "/env") {
            if let Some(n) = e.at("/valueFrom/secretKeyRef/name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
    }
    for v in items(pod, "/spec/volumes") {
        let refs = [
            "/azureFile/secretName",
            "/cephfs/secretRef/name",
            "/cinder/secretRef/name",
            "/flexVolume/secretRef/name",
            "/rbd/secretRef/name",
            "/secret/secretName",
            "/scaleIO/secretRef/name",
            "/iscsi/secretRef/name",
            "/storageos/secretRef/name",
            "/csi/nodePublishSecretRef/name",
        ];
        for r in refs {
            if let Some(n) = v.at(r).and_then(Value::as_str) {
                if !n.is_empty() || r == "/secret/secretName" {
                    out.push(n.to_string());
                }
            }
        }
        for s in items(v, "/projected/sources") {
            if let Some(n) = s.at("/secret/name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
    }
    out
}

/// The config maps a pod references (Kubernetes' `VisitPodConfigmapNames`).
pub(crate) fn pod_configmap_names(pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in all_containers(pod) {
        for e in items(c, "/envFrom") {
            if let Some(n) = e.at("/configMapRef/name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
        for e in items(c, "/env") {
            if let Some(n) = e
                .at("/valueFrom/configMapKeyRef/name")
                .and_then(Value::as_str)
            {
                out.push(n.to_string());
            }
        }
    }
    for v in items(pod, "/spec/volumes") {
        for s in items(v, "/projected/sources") {
            if let Some(n) = s.at("/configMap/name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
        }
        if let Some(n) = v.at("/configMap/name").and_then(Value::as_str) {
            out.push(n.to_string());
        }
    }
    out
}

/// A resource list (`cpu` → quantity), ordered by name.
pub(crate) type ResourceList = BTreeMap<String, Quantity>;

/// Parse a resource list; values that are not quantities are skipped (validation reports them).
pub(crate) fn resource_list(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), quantity::parse_value(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The JSON form of a resource list (canonical quantities).
pub(crate) fn resource_list_json(l: &ResourceList) -> Map<String, Value> {
    l.iter()
        .map(|(k, q)| (k.clone(), Value::String(q.canonical())))
        .collect()
}

pub(crate) fn zero() -> Quantity {
    Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    }
}

/// `Quantity.Add`: the sum keeps the left operand's format unless it is zero.
pub(crate) fn qadd(a: Quantity, b: Quantity) -> Quantity {
    Quantity {
        nanos: a.nanos.saturating_add(b.nanos),
        format: if a.nanos == 0 { b.format } else { a.format },
    }
}

/// `Quantity.Sub`, with the same format rule as [`qadd`].
pub(crate) fn qsub(a: Quantity, b: Quantity) -> Quantity {
    Quantity {
        nanos: a.nanos.saturating_sub(b.nanos),
        format: if a.nanos == 0 { b.format } else { a.format },
    }
}

/// Add `new` into `list` (Kubernetes' `addResourceList`).
pub(crate) fn add_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        let sum = match list.get(k) {
            Some(v) => qadd(*v, *q),
            None => *q,
        };
        list.insert(k.clone(), sum);
    }
}

/// Keep the larger of each quantity (Kubernetes' `maxResourceList`).
pub(crate) fn max_into(list: &mut ResourceList, new: &ResourceList) {
    for (k, q) in new {
        if list.get(k).is_none_or(|v| q.nanos > v.nanos) {
            list.insert(k.clone(), *q);
        }
    }
}

/// The effective requests (or limits) of a pod's containers as Kubernetes'
/// `AggregateContainerRequests`/`Limits` compute them: regular containers and sidecars
/// (restartable init containers) add up; each plain init container runs alongside the
/// sidecars started before it; the pod needs the larger of the two.
fn aggregate_containers(pod: &Value, field: &str) -> ResourceList {
    let mut total = ResourceList::new();
    for c in items(pod, "/spec/containers") {
        add_into(&mut total, &resource_list(c.at(field)));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in items(pod, "/spec/initContainers") {
        let own = resource_list(c.at(field));
        if str_at(c, "/restartPolicy") == "Always" {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut running = own;
            add_into(&mut running, &sidecars);
            max_into(&mut init_max, &running);
        }
    }
    max_into(&mut total, &init_max);
    total
}

/// A pod's requests (`PodRequests`), with its overhead when `overhead` is set.
pub(crate) fn pod_requests(pod: &Value, overhead: bool) -> ResourceList {
    let mut reqs = aggregate_containers(pod, "/resources/requests");
    if overhead {
        add_into(&mut reqs, &resource_list(pod.at("/spec/overhead")));
    }
    reqs
}

/// A pod's limits (`PodLimits`); overhead is added only to resources that have a limit.
pub(crate) fn pod_limits(pod: &Value, overhead: bool) -> ResourceList {
    let mut limits = aggregate_containers(pod, "/resources/limits");
    if overhead {
        for (k, q) in resource_list(pod.at("/spec/overhead")) {
            if let Some(v) = limits.get_mut(&k) {
                *v = qadd(*v, q);
            }
        }
    }
    limits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_add_up_and_init_containers_take_the_max() {
        let pod = json!({"spec": {
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
            ],
            "overhead": {"cpu": "10m"},
        }});
        let r = resource_list_json(&pod_requests(&pod, false));
        assert_eq!(r["cpu"], json!("2100m"));
        assert_eq!(r["memory"], json!("1Gi"));
        let r = resource_list_json(&pod_requests(&pod, true));
        assert_eq!(r["cpu"], json!("2110m"));
    }

    #[test]
    fn aggregate_brackets_several_distinct_errors() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
    }

    #[test]
    fn pod_references_cover_env_volumes_and_pull_secrets() {
        let pod = json!({"spec": {
            "imagePullSecrets": [{"name": "pull"}],
            "containers": [{"name": "c",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "envfrom"}}, {"configMapRef": {"name": "cm-envfrom"}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol"}},
                {"name": "p", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "cm-proj"}}]}},
                {"name": "c", "configMap": {"name": "cm-vol"}},
            ],
        }});
        assert_eq!(
            pod_secret_names(&pod),
            ["pull", "envfrom", "env", "vol", "proj"]
        );
        assert_eq!(
            pod_configmap_names(&pod),
            ["cm-envfrom", "cm-env", "cm-proj", "cm-vol"]
        );
    }
}
