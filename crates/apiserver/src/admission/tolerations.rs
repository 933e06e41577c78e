//! DefaultTolerationSeconds, as Kubernetes' `plugin/pkg/admission/defaulttolerationseconds`:
//! pods that do not already tolerate the not-ready and unreachable NoExecute taints get
//! tolerations for them bounded to 300 seconds, so the taint manager evicts them from a lost
//! node after five minutes.

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::builtin::{is_core, items, str_at};
use super::{Attributes, Operation, Plugin};
use crate::error::ApiResult;

pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";
/// Kubernetes' `--default-not-ready-toleration-seconds` and `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// The DefaultTolerationSeconds admission plugin.
pub struct DefaultTolerationSeconds;

#[async_trait]
impl Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pod) = obj else { return Ok(()) };
        if !is_core(a, "pods")
            || !a.subresource.is_empty()
            || !matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        add_default_tolerations(pod);
        Ok(())
    }
}

/// Whether some toleration covers `key`'s NoExecute taint (an empty key or effect matches all).
fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = str_at(t, "/key");
        let e = str_at(t, "/effect");
        (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
    })
}

pub fn add_default_tolerations(pod: &mut Value) {
    let existing = items(pod, "/spec/tolerations");
    let missing: Vec<&str> = [NOT_READY_TAINT, UNREACHABLE_TAINT]
        .into_iter()
        .filter(|k| !tolerates(existing, k))
        .collect();
    if missing.is_empty() {
        return;
    }
    let Some(root) = pod.as_object_mut() else {
        return;
    };
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let list = spec
        .entry("tolerations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("array");
    for key in missing {
        list.push(json!({
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
        }));
    }
}
