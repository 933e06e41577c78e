//! TaintNodesByCondition, as Kubernetes' `plugin/pkg/admission/nodetaint`: a node is created
//! with the `node.kubernetes.io/not-ready:NoSchedule` taint, so nothing is scheduled onto it
//! before the node lifecycle controller has seen it ready (and removed the taint).

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::builtin::{is_core, items, str_at};
use super::tolerations::NOT_READY_TAINT;
use super::{Attributes, Operation, Plugin};
use crate::error::ApiResult;

/// The TaintNodesByCondition admission plugin.
pub struct TaintNodesByCondition;

#[async_trait]
impl Plugin for TaintNodesByCondition {
    fn name(&self) -> &'static str {
        "TaintNodesByCondition"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(node) = obj else { return Ok(()) };
        if is_core(a, "nodes") && a.subresource.is_empty() && a.operation == Operation::Create {
            add_not_ready_taint(node);
        }
        Ok(())
    }
}

/// Add the NoSchedule not-ready taint unless a taint with that key and effect exists.
pub fn add_not_ready_taint(node: &mut Value) {
    let present = items(node, "/spec/taints")
        .iter()
        .any(|t| str_at(t, "/key") == NOT_READY_TAINT && str_at(t, "/effect") == "NoSchedule");
    if present {
        return;
    }
    let Some(root) = node.as_object_mut() else {
        return;
    };
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let taints = spec
        .entry("taints")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !taints.is_array() {
        *taints = Value::Array(Vec::new());
    }
    taints
        .as_array_mut()
        .expect("array")
        .push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule"}));
}
