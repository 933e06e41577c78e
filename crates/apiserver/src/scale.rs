//! The `scale` subresource: an autoscaling/v1 Scale view of a workload's replicas.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::meta;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, FieldError};
use crate::handlers::{value_response, Body, Call};
use crate::patch::PatchType;
use crate::registry::{Registry, WriteOptions};

/// The label selector of a workload, as the Scale's `status.selector` string.
fn selector_string(obj: &Value) -> String {
    let sel = obj.pointer("/spec/selector");
    let mut parts = Vec::new();
    match sel {
        // ReplicationControllers have a plain map selector.
        Some(Value::Object(m))
            if !m.contains_key("matchLabels") && !m.contains_key("matchExpressions") =>
        {
            for (k, v) in m {
                parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
            }
        }
        Some(s) => {
            if let Some(Value::Object(m)) = s.get("matchLabels") {
                for (k, v) in m {
                    parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
                }
            }
            for e in s
                .get("matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => parts.push(format!("{key} in ({})", values.join(","))),
                    "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                    "Exists" => parts.push(key.to_string()),
                    "DoesNotExist" => parts.push(format!("!{key}")),
                    _ => {}
                }
            }
        }
        None => {}
    }
    parts.join(",")
}

/// The Scale object for a workload.
pub fn to_scale(info: &ResourceInfo, obj: &Value) -> ApiResult<Value> {
    if !info.has_subresource("scale") {
        return Err(ApiError::not_found_path());
    }
    let md = meta::metadata(obj).cloned().unwrap_or_default();
    let mut smd = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = md.get(f) {
            smd[f] = v.clone();
        }
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": smd,
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(obj),
        },
    }))
}

fn replicas_of(scale: &Value, info: &ResourceInfo, name: &str) -> ApiResult<i64> {
    let r = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
    match r.as_i64() {
        Some(n) if n >= 0 => Ok(n),
        Some(_) => Err(ApiError::invalid(
            info,
            name,
            vec![FieldError::invalid(
                "spec.replicas",
                &r,
                "must be greater than or equal to 0",
            )],
        )),
        None => Err(ApiError::bad_request("spec.replicas must be an integer")),
    }
}

async fn write_replicas(
    reg: &Registry,
    call: &Call<'_>,
    opts: &WriteOptions,
    mut desired: impl FnMut(&Value) -> ApiResult<(i64, String)>,
) -> ApiResult<http::Response<Body>> {
    let info = reg.info;
    let name = call.info.name.clone();
    let w = reg
        .update_with(&call.info.namespace, &call.info.name, "", opts, |old| {
            let scale = to_scale(info, old)?;
            let (replicas, rv) = desired(&scale)?;
            let mut next = old.clone();
            next["spec"]["replicas"] = json!(replicas);
            if !rv.is_empty() {
                meta::set_meta_str(&mut next, "resourceVersion", &rv);
            }
            let _ = &name;
            Ok(next)
        })
        .await?;
    Ok(value_response(200, &to_scale(info, &w.value)?))
}

/// PUT .../scale
pub async fn update_scale(reg: &Registry, call: &Call<'_>) -> ApiResult<http::Response<Body>> {
    let kind = crate::codec::body_type(
        call.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    )?;
    let body = crate::codec::decode_body(&call.body, kind)?;
    let opts = WriteOptions::default();
    let info = reg.info;
    let name = call.info.name.clone();
    write_replicas(reg, call, &opts, |_| {
        Ok((
            replicas_of(&body, info, &name)?,
            meta::resource_version(&body).to_string(),
        ))
    })
    .await
}

/// PATCH .../scale
pub async fn patch_scale(
    reg: &Registry,
    call: &Call<'_>,
    patch_type: PatchType,
    patch: &Value,
    opts: &WriteOptions,
) -> ApiResult<http::Response<Body>> {
    let info = reg.info;
    let name = call.info.name.clone();
    write_replicas(reg, call, opts, |scale| {
        let patched = crate::patch::apply_scale(patch_type, scale, patch)?;
        let rv = meta::resource_version(&patched);
        let rv = if rv == meta::resource_version(scale) {
            ""
        } else {
            rv
        };
        Ok((replicas_of(&patched, info, &name)?, rv.to_string()))
    })
    .await
}
