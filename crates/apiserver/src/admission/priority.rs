//! Priority, as Kubernetes' `plugin/pkg/admission/priority`: on pod create, `spec.priority`
//! and `spec.preemptionPolicy` are resolved from the pod's PriorityClass (or the global
//! default class, or 0); on update they are carried over. PriorityClass writes may not make
//! a second global default.
//!
//! Since Kubernetes 1.17 the two system classes may be used in any namespace (their use is
//! limited, if at all, by ResourceQuota configuration), so no namespace check is made here.

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::builtin::{forbidden, is_core, str_at};
use super::{Attributes, Operation, Plugin};
use crate::error::ApiResult;
use crate::objects::Objects;
use capstan_api::meta::At as _;

const GROUP: &str = "scheduling.k8s.io";
/// The highest priority user classes may have; the system classes sit above it.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// `system-cluster-critical`'s value; `system-node-critical` is 1000 higher.
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
const DEFAULT_PREEMPTION_POLICY: &str = "PreemptLowerPriority";

/// The built-in PriorityClasses the server creates at start.
pub fn system_priority_classes() -> Vec<Value> {
    [
        (
            "system-node-critical",
            SYSTEM_CRITICAL_PRIORITY + 1000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            SYSTEM_CRITICAL_PRIORITY,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
    .into_iter()
    .map(|(name, value, description)| {
        json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": false,
            "description": description,
            "preemptionPolicy": DEFAULT_PREEMPTION_POLICY,
        })
    })
    .collect()
}

/// The Priority admission plugin.
pub struct Priority;

#[async_trait]
impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pod) = obj else { return Ok(()) };
        if !a.subresource.is_empty() || !is_core(a, "pods") {
            return Ok(());
        }
        match a.operation {
            Operation::Update => {
                if let Some(old) = old {
                    keep_from_old(pod, old);
                }
                Ok(())
            }
            Operation::Create => admit_pod(a, pod),
            _ => Ok(()),
        }
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pc) = obj else { return Ok(()) };
        if !a.subresource.is_empty()
            || a.info.group != GROUP
            || a.info.plural != "priorityclasses"
            || !matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        if pc.get("globalDefault").and_then(Value::as_bool) != Some(true) {
            return Ok(());
        }
        if let Some(default) = default_class(a.objects) {
            let dname = capstan_api::meta::name(&default);
            if a.operation == Operation::Create || dname != capstan_api::meta::name(pc) {
                return Err(forbidden(
                    a,
                    Some(pc),
                    format!("PriorityClass {dname} is already marked as default. Only one default can exist"),
                ));
            }
        }
        Ok(())
    }
}

/// API validation forbids changing these; carry over what the plugin set at create.
fn keep_from_old(pod: &mut Value, old: &Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["priority", "preemptionPolicy"] {
        if spec.get(field).is_none_or(Value::is_null) {
            if let Some(v) = old.at(&format!("/spec/{field}")) {
                spec.insert(field.into(), v.clone());
            }
        }
    }
}

/// The global default class; when several claim it (a race), the lowest value wins.
fn default_class(objects: &dyn Objects) -> Option<Value> {
    objects
        .list(GROUP, "priorityclasses", "")
        .into_iter()
        .filter(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|pc| pc.get("value").and_then(Value::as_i64).unwrap_or(0))
}

fn admit_pod(a: &Attributes<'_>, pod: &mut Value) -> ApiResult<()> {
    let class_name = str_at(pod, "/spec/priorityClassName").to_string();
    let (name, priority, policy) = if class_name.is_empty() {
        match default_class(a.objects) {
            Some(pc) => (
                capstan_api::meta::name(&pc).to_string(),
                pc.get("value").and_then(Value::as_i64).unwrap_or(0),
                pc.get("preemptionPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            None => (
                String::new(),
                0,
                Some(DEFAULT_PREEMPTION_POLICY.to_string()),
            ),
        }
    } else {
        let Some(pc) = a.objects.get(GROUP, "priorityclasses", "", &class_name) else {
            return Err(forbidden(
                a,
                Some(pod),
                format!("no PriorityClass with name {class_name} was found"),
            ));
        };
        (
            class_name.clone(),
            pc.get("value").and_then(Value::as_i64).unwrap_or(0),
            pc.get("preemptionPolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
        )
    };
    if let Some(given) = pod.at("/spec/priority").and_then(Value::as_i64) {
        if given != priority {
            return Err(forbidden(
                a,
                Some(pod),
                format!("the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"),
            ));
        }
    }
    if let Some(policy) = &policy {
        if let Some(given) = pod.at("/spec/preemptionPolicy").and_then(Value::as_str) {
            if given != policy {
                return Err(forbidden(
                    a,
                    Some(pod),
                    format!("the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"),
                ));
            }
        }
    }
    let Some(root) = pod.as_object_mut() else {
        return Ok(());
    };
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(spec) = spec.as_object_mut() else {
        return Ok(());
    };
    if class_name.is_empty() && !name.is_empty() {
        spec.insert("priorityClassName".into(), Value::String(name));
    }
    spec.insert("priority".into(), json!(priority));
    if let Some(policy) = policy {
        spec.insert("preemptionPolicy".into(), Value::String(policy));
    }
    Ok(())
}
