//! Pod subresources with their own semantics: `binding` (the scheduler's assignment, also the
//! legacy `bindings` resource) and `eviction` (deletion that honours PodDisruptionBudgets).
//! Mirrors Kubernetes' `pkg/registry/core/pod/storage` (BindingREST, EvictionREST).

use std::sync::Arc;

use capstan_api::meta;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, FieldError};
use crate::handlers::{value_response, Body, Call};
use crate::registry::{DeleteOptions, Registry, WriteOptions};
use crate::ApiServer;
use capstan_api::meta::At as _;

fn body_object(call: &Call) -> ApiResult<Value> {
    let ct = call
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let v = crate::codec::decode_body(&call.body, crate::codec::body_type(ct)?)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request is not a JSON object",
        ));
    }
    Ok(v)
}

fn success(code: u16) -> http::Response<Body> {
    value_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}),
    )
}

/// POST pods/<name>/binding or POST bindings: assign the pod to a node.
pub async fn bind(pods: &Registry, call: &Call<'_>) -> ApiResult<http::Response<Body>> {
    let binding = body_object(call)?;
    let name = if call.info.name.is_empty() {
        meta::name(&binding).to_string()
    } else {
        call.info.name.clone()
    };
    if !call.info.name.is_empty()
        && !meta::name(&binding).is_empty()
        && meta::name(&binding) != name
    {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Binding object: {name} != {}",
            meta::name(&binding)
        )));
    }
    let target = binding
        .at("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let target_kind = binding
        .at("/target/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if target.is_empty() || !(target_kind.is_empty() || target_kind == "Node") {
        let info = capstan_api::catalogue::find("", "v1", "bindings").expect("bindings exist");
        return Err(ApiError::invalid(
            info,
            &name,
            vec![FieldError::not_supported(
                "target.kind",
                &json!(target_kind),
                &["Node"],
            )],
        ));
    }
    let opts = WriteOptions::default();
    let ns = call.info.namespace.clone();
    // A binding without annotations is made in the stored JSON itself; anything unusual
    // (annotations to copy, a pod already bound or being deleted) takes the general path.
    if binding.at("/metadata/annotations").is_none()
        && pods
            .update_stored(&ns, &name, &[("spec.nodeName", target)], |stored| {
                bind_stored(stored, target)
            })
            .await?
            .is_some()
    {
        return Ok(success(201));
    }
    pods.bind_with(&ns, &name, &opts, |pod| {
        if meta::deletion_timestamp(pod).is_some() {
            return Err(ApiError::conflict(
                pods.info,
                &name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        if let Some(node) = pod
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                pods.info,
                &name,
                &format!("pod {name} is already assigned to node \"{node}\""),
            ));
        }
        pod["spec"]["nodeName"] = json!(target);
        set_condition(pod, "PodScheduled", "True");
        // Annotations on the Binding are copied to the pod, as Kubernetes does.
        if let Some(annotations) = binding
            .at("/metadata/annotations")
            .and_then(Value::as_object)
        {
            let md = meta::metadata_mut(pod);
            let target = md.entry("annotations").or_insert_with(|| json!({}));
            if let Some(t) = target.as_object_mut() {
                for (k, v) in annotations {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(())
    })
    .await?;
    Ok(success(201))
}

fn set_condition(pod: &mut Value, ty: &str, status: &str) {
    let now = meta::format_time(std::time::SystemTime::now());
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds = pod["status"]
        .as_object_mut()
        .expect("object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
    {
        // `UpdatePodCondition`: the condition is replaced (an earlier reason and message go);
        // the transition time moves only when the status changes.
        Some(c) => {
            let since = match c.get("status").and_then(Value::as_str) == Some(status) {
                true => c.get("lastTransitionTime").cloned().unwrap_or(json!(now)),
                false => json!(now),
            };
            *c = json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
        }
        None => list.push(
            json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": now}),
        ),
    }
}

/// The stored pod `stored` bound to `node`, edited in its stored JSON: `spec.nodeName`
/// inserted in key order and the PodScheduled condition set true, with metadata and the rest
/// of the spec copied byte for byte, so that only the status is parsed. The result is what
/// encoding the edited object would give. None when the pod is being deleted or already bound
/// (the general path reports those) or its JSON is not laid out as capstan stores objects
/// (metadata first, then the other keys in order, none escaped).
fn bind_stored(stored: &[u8], node: &str) -> Option<Vec<u8>> {
    use crate::rawjson::members;
    let mut top = members(stored)?;
    let (metadata, rest) = top.split_first()?;
    if metadata.0 != b"metadata"
        || members(metadata.1)?
            .iter()
            .any(|(k, _)| *k == b"deletionTimestamp")
        || !plain_and_sorted(rest)
    {
        return None;
    }
    let spec_at = 1 + rest.iter().position(|(k, _)| *k == b"spec")?;
    let status_at = 1 + rest.partition_point(|(k, _)| *k < &b"status"[..]);
    let has_status = top.get(status_at).is_some_and(|(k, _)| *k == b"status");
    let mut holder = json!({"status": {}});
    if has_status {
        holder["status"] = serde_json::from_slice(top[status_at].1).ok()?;
    }
    set_condition(&mut holder, "PodScheduled", "True");
    let status = serde_json::to_vec(&holder["status"]).ok()?;
    let spec = bind_spec(top[spec_at].1, node)?;
    top[spec_at].1 = &spec;
    match has_status {
        true => top[status_at].1 = &status,
        false => top.insert(status_at, (b"status", &status)),
    }
    Some(object(&top))
}

/// The stored spec with `nodeName` inserted where its key sorts; None when it has one already.
fn bind_spec(spec: &[u8], node: &str) -> Option<Vec<u8>> {
    let mut fields = crate::rawjson::members(spec)?;
    if !plain_and_sorted(&fields) || fields.iter().any(|(k, _)| *k == b"nodeName") {
        return None;
    }
    let name = serde_json::to_vec(node).ok()?;
    let at = fields.partition_point(|(k, _)| *k < &b"nodeName"[..]);
    fields.insert(at, (b"nodeName", &name));
    Some(object(&fields))
}

/// Keys with nothing escaped, in order: what the store's encoder writes.
fn plain_and_sorted(members: &[(&[u8], &[u8])]) -> bool {
    !members.iter().any(|(k, _)| k.contains(&b'\\')) && members.is_sorted_by(|a, b| a.0 < b.0)
}

/// `{"key":value,...}` of members whose keys need no escaping.
fn object(members: &[(&[u8], &[u8])]) -> Vec<u8> {
    let size: usize = members.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'{');
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(k);
        out.extend_from_slice(b"\":");
        out.extend_from_slice(v);
    }
    out.push(b'}');
    out
}

/// POST pods/<name>/eviction: delete the pod unless a PodDisruptionBudget forbids it.
pub async fn evict(
    api: &Arc<ApiServer>,
    pods: &Registry,
    call: &Call<'_>,
) -> ApiResult<http::Response<Body>> {
    let eviction = body_object(call)?;
    let ns = call.info.namespace.clone();
    let name = call.info.name.clone();
    let pod = pods.get(&ns, &name).await?.value;
    let pdbs = api
        .registry("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("no PodDisruptionBudget registry"))?;
    let finished = matches!(
        pod.at("/status/phase").and_then(Value::as_str),
        Some("Succeeded") | Some("Failed")
    );
    if !finished && meta::deletion_timestamp(&pod).is_none() {
        let filter = crate::filter::Filter::new(pdbs.info, &ns, "", "")?;
        let page = pdbs.list_from_store(&filter, 0, "", 0).await?;
        let labels = meta::labels(&pod).cloned().unwrap_or_default();
        let mut matching = Vec::new();
        for item in &page.items {
            let pdb: Value =
                serde_json::from_slice(item).map_err(|e| ApiError::internal(e.to_string()))?;
            let sel = pdb.at("/spec/selector").cloned().unwrap_or(Value::Null);
            let selector = capstan_api::selector::LabelSelector::from_json(&sel)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            if !selector.is_nothing() && !selector.is_empty() && selector.matches(&labels) {
                matching.push(pdb);
            }
        }
        if matching.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = matching.first() {
            charge_budget(&pdbs, pdb, &name).await?;
        }
    }
    let mut opts = DeleteOptions::default();
    if let Some(d) = eviction.get("deleteOptions") {
        opts.grace_period = d.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.precondition_uid = d
            .at("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        opts.precondition_rv = d
            .at("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    pods.delete(&ns, &name, &opts).await?;
    Ok(success(201))
}

/// Take one disruption from the budget, or answer 429 as Kubernetes does.
async fn charge_budget(pdbs: &Registry, pdb: &Value, pod: &str) -> ApiResult<()> {
    let too_many = || {
        let mut e = ApiError::new(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
        e.details = Some(
            json!({"causes": [{"reason": "DisruptionBudget", "message": format!(
            "The disruption budget {} needs {} healthy pods and has {} currently",
            meta::name(pdb),
            pdb.at("/status/desiredHealthy").and_then(Value::as_i64).unwrap_or(0),
            pdb.at("/status/currentHealthy").and_then(Value::as_i64).unwrap_or(0))}]}),
        );
        e
    };
    let observed = pdb
        .at("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if observed < meta::generation(pdb) {
        return Err(too_many());
    }
    if pdb
        .at("/status/disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        <= 0
    {
        return Err(too_many());
    }
    let now = meta::format_time(std::time::SystemTime::now());
    pdbs.update_with(
        meta::namespace(pdb),
        meta::name(pdb),
        "status",
        &WriteOptions::default(),
        |old| {
            let allowed = old
                .at("/status/disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if allowed <= 0 {
                return Err(too_many());
            }
            let mut next = old.clone();
            next["status"]["disruptionsAllowed"] = json!(allowed - 1);
            let disrupted = next["status"]
                .as_object_mut()
                .expect("status is an object")
                .entry("disruptedPods")
                .or_insert_with(|| json!({}));
            disrupted[pod] = json!(now);
            Ok(next)
        },
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general path: the pod decoded, edited and encoded again.
    fn bound_by_value(pod: &Value, node: &str) -> Value {
        let mut next = pod.clone();
        next["spec"]["nodeName"] = json!(node);
        set_condition(&mut next, "PodScheduled", "True");
        next
    }

    /// Transition times come from the clock: the same in both results once set to one value.
    fn same_times(v: &mut Value) {
        if let Some(list) = v
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            for c in list {
                c["lastTransitionTime"] = json!("T");
            }
        }
    }

    fn check(pod: Value, node: &str) {
        let stored = crate::codec::encode_for_store(&pod);
        let spliced = bind_stored(&stored, node).expect("bound in place");
        let mut got: Value = serde_json::from_slice(&spliced).expect("valid JSON");
        let mut want = bound_by_value(&pod, node);
        same_times(&mut got);
        same_times(&mut want);
        assert_eq!(got, want);
        // Laid out exactly as the store's encoder lays the object out.
        let spliced_again =
            crate::codec::encode_for_store(&serde_json::from_slice(&spliced).unwrap());
        assert_eq!(
            String::from_utf8_lossy(&spliced),
            String::from_utf8_lossy(&spliced_again)
        );
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}}}}}}]},
            "spec": {"containers": [{"name": "c", "image": "i", "args": ["}", "\"]"]}],
                "restartPolicy": "Always", "schedulerName": "default-scheduler", "tolerations": []},
            "status": {"phase": "Pending", "qosClass": "BestEffort"}
        })
    }

    #[test]
    fn a_binding_in_place_gives_what_the_general_path_gives() {
        check(pod(), "node-1");
        check(pod(), "n\"odd\\name");
        // No status yet; a spec whose keys all sort before nodeName, or all after it.
        let mut p = pod();
        p.as_object_mut().unwrap().remove("status");
        check(p, "n");
        let mut p = pod();
        p["spec"] = json!({"affinity": {}, "containers": []});
        check(p, "n");
        let mut p = pod();
        p["spec"] = json!({"priority": 0, "volumes": []});
        check(p, "n");
        // A failed scheduling attempt's condition is replaced, its reason and message gone.
        let mut p = pod();
        p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available", "lastProbeTime": null,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        check(p, "n");
    }

    #[test]
    fn pods_bound_or_being_deleted_are_left_to_the_general_path() {
        let mut p = pod();
        p["spec"]["nodeName"] = json!("other");
        assert!(bind_stored(&crate::codec::encode_for_store(&p), "n").is_none());
        let mut p = pod();
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(bind_stored(&crate::codec::encode_for_store(&p), "n").is_none());
        assert!(
            bind_stored(b"{\"spec\":{}}", "n").is_none(),
            "metadata not first"
        );
        assert!(bind_stored(b"not json", "n").is_none());
    }
}
