//! The `scale` subresource: an autoscaling/v1 Scale view of a workload's replicas.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::meta;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, FieldError};
use crate::handlers::{value_response, Body, Call};
use crate::patch::PatchType;
use crate::registry::{Registry, WriteOptions};
use capstan_api::meta::At as _;

/// The label selector of a workload, as the Scale's `status.selector` string.
fn selector_string(obj: &Value) -> String {
    let sel = obj.at("/spec/selector");
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

/// Where a custom resource keeps what its Scale shows (`.spec.replicas`-style paths).
#[derive(Debug, Clone, Default)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// The JSON pointer of a simple `.a.b.c` path.
fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |mut p, seg| {
            p.push('/');
            p.push_str(&seg.replace('~', "~0").replace('/', "~1"));
            p
        })
}

/// The Scale object for a workload.
pub fn to_scale(reg: &Registry, obj: &Value) -> ApiResult<Value> {
    let info = reg.info;
    if !info.has_subresource("scale") {
        return Err(ApiError::not_found_path());
    }
    if let Some(paths) = reg.strategy.scale_paths() {
        return Ok(custom_scale(obj, &paths));
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
        "spec": {"replicas": obj.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": obj.at("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(obj),
        },
    }))
}

/// A custom object's Scale, read from its definition's paths (missing values read as zero
/// and an empty selector, as Kubernetes reads them).
fn custom_scale(obj: &Value, paths: &ScalePaths) -> Value {
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
    let int = |p: &str| obj.at(&pointer(p)).and_then(Value::as_i64).unwrap_or(0);
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| obj.at(&pointer(p)))
        .and_then(Value::as_str)
        .unwrap_or("");
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": smd,
        "spec": {"replicas": int(&paths.spec_replicas)},
        "status": {"replicas": int(&paths.status_replicas), "selector": selector},
    })
}

/// Set the value at a `.a.b` path, making the objects on the way.
fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut at = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let Some(map) = at.as_object_mut() else {
            return;
        };
        if i + 1 == segs.len() {
            map.insert(seg.to_string(), value);
            return;
        }
        at = map.entry(seg.to_string()).or_insert_with(|| json!({}));
    }
}

fn replicas_of(scale: &Value, info: &ResourceInfo, name: &str) -> ApiResult<i64> {
    let r = scale.at("/spec/replicas").cloned().unwrap_or(json!(0));
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
    let name = call.info.name.clone();
    let paths = reg.strategy.scale_paths();
    let w = reg
        .update_with(&call.info.namespace, &call.info.name, "", opts, |old| {
            let scale = to_scale(reg, old)?;
            let (replicas, rv) = desired(&scale)?;
            let mut next = old.clone();
            match &paths {
                Some(p) => set_path(&mut next, &p.spec_replicas, json!(replicas)),
                None => next["spec"]["replicas"] = json!(replicas),
            }
            if !rv.is_empty() {
                meta::set_meta_str(&mut next, "resourceVersion", &rv);
            }
            let _ = &name;
            Ok(next)
        })
        .await?;
    Ok(value_response(200, &to_scale(reg, &w.value)?))
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
