//! The resource metrics API, `metrics.k8s.io/v1beta1`, served by the API server itself as
//! metrics-server would serve it through aggregation: `NodeMetrics` (`nodes`, cluster-scoped)
//! and `PodMetrics` (`pods`, namespaced), read-only (get, list).
//!
//! Usage comes from each Ready node's kubelet (`/metrics/resource`, reached as the other
//! kubelet requests are, with the API server's kubelet client certificate), scraped on demand
//! and reused for [`RESOLUTION`]. As metrics-server, the last two scrapes of every node and
//! container are kept and CPU usage is the rate between their cumulative counters; memory is
//! the last working set. A node or container seen for the first time is scraped once more a
//! moment later, so that a first request has a rate to answer with.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use capstan_api::catalogue::ResourceInfo;
use capstan_api::selector::field::FieldSelector;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;
use crate::handlers::{error_response, negotiate, value_response, Body, Output};
use crate::kubelet_proxy::{send, target_of};
use crate::request::{Query, RequestInfo};
use crate::tables::IncludeObject;
use crate::ApiServer;
use capstan_api::meta::At as _;

pub const GROUP: &str = "metrics.k8s.io";
pub const VERSION: &str = "v1beta1";

/// How long one scrape of the kubelets answers requests (metrics-server's resolution).
pub const RESOLUTION: Duration = Duration::from_secs(10);
/// How long a kubelet may take to answer a scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before a second scrape when the first one left points without a predecessor.
const SECOND_SCRAPE_AFTER: Duration = Duration::from_secs(1);

pub static NODE_METRICS: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "NodeMetrics",
    plural: "nodes",
    singular: "",
    namespaced: false,
    verbs: &["get", "list"],
    short_names: &[],
    categories: &[],
    subresources: &[],
    storage: "",
    custom: false,
};

pub static POD_METRICS: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: VERSION,
    kind: "PodMetrics",
    plural: "pods",
    singular: "",
    namespaced: true,
    verbs: &["get", "list"],
    short_names: &[],
    categories: &[],
    subresources: &[],
    storage: "",
    custom: false,
};

/// The resources, for discovery (served after every other group, as an aggregated API of
/// low priority is).
pub static RESOURCES: [&ResourceInfo; 2] = [&NODE_METRICS, &POD_METRICS];

/// One measurement of a node or container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Point {
    /// When the node or container started (ns since the epoch; 0 when unknown).
    pub start_ns: i128,
    /// When it was measured (ns since the epoch).
    pub ts_ns: i128,
    /// Cumulative CPU time in core-nanoseconds.
    pub cpu: u64,
    /// Working set in bytes.
    pub memory: u64,
}

type PodKey = (String, String);

/// What one scrape of every node gave.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Batch {
    pub nodes: HashMap<String, Point>,
    pub pods: HashMap<PodKey, HashMap<String, Point>>,
}

/// Usage over a window: CPU in nanocores, memory in bytes, and the window's end and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nano_cores: u64,
    pub memory: u64,
    pub ts_ns: i128,
    pub window_ns: u64,
}

/// The last two points of every node and container.
#[derive(Debug, Default, Clone)]
pub struct Points {
    nodes_last: HashMap<String, Point>,
    nodes_prev: HashMap<String, Point>,
    pods_last: HashMap<PodKey, HashMap<String, Point>>,
    pods_prev: HashMap<PodKey, HashMap<String, Point>>,
}

impl Points {
    /// Take in a new scrape: what it has becomes the last points, the former last ones
    /// (or the kept previous ones) the previous, when older and, for containers, of the
    /// same run (no restart in between). What the scrape lacks is forgotten.
    pub fn store(&mut self, batch: Batch) {
        let mut nodes_prev = HashMap::new();
        for (name, new) in &batch.nodes {
            if let Some(old) = self.nodes_last.get(name) {
                if new.ts_ns > old.ts_ns {
                    nodes_prev.insert(name.clone(), *old);
                } else if let Some(p) = self.nodes_prev.get(name).filter(|p| p.ts_ns < new.ts_ns) {
                    nodes_prev.insert(name.clone(), *p);
                }
            }
        }
        let mut pods_prev = HashMap::new();
        for (key, containers) in &batch.pods {
            let mut prev = HashMap::new();
            for (name, new) in containers {
                let Some(old) = self.pods_last.get(key).and_then(|p| p.get(name)) else {
                    continue;
                };
                if new.start_ns >= old.ts_ns {
                    // Restarted since: the old counters belong to another run.
                    continue;
                }
                if new.ts_ns > old.ts_ns {
                    prev.insert(name.clone(), *old);
                } else if let Some(p) = self
                    .pods_prev
                    .get(key)
                    .and_then(|p| p.get(name))
                    .filter(|p| p.ts_ns < new.ts_ns)
                {
                    prev.insert(name.clone(), *p);
                }
            }
            if !prev.is_empty() {
                pods_prev.insert(key.clone(), prev);
            }
        }
        self.nodes_last = batch.nodes;
        self.nodes_prev = nodes_prev;
        self.pods_last = batch.pods;
        self.pods_prev = pods_prev;
    }

    /// Whether some last point has no previous one to make a rate with.
    pub fn incomplete(&self) -> bool {
        self.nodes_last
            .keys()
            .any(|n| !self.nodes_prev.contains_key(n))
            || self.pods_last.iter().any(|(k, cs)| {
                cs.keys()
                    .any(|c| !self.pods_prev.get(k).is_some_and(|p| p.contains_key(c)))
            })
    }

    pub fn node(&self, name: &str) -> Option<Usage> {
        usage(self.nodes_last.get(name)?, self.nodes_prev.get(name)?)
    }

    /// The usage of each container of a pod (by container name) and the pod's time (that of
    /// its earliest container), when every container has a rate.
    pub fn pod(&self, ns: &str, name: &str) -> Option<(Vec<(String, Usage)>, Usage)> {
        let key = (ns.to_string(), name.to_string());
        let last = self.pods_last.get(&key)?;
        let prev = self.pods_prev.get(&key)?;
        let mut out = Vec::new();
        let mut earliest: Option<Usage> = None;
        for (c, l) in last {
            let p = prev.get(c)?;
            // A container whose counters went wrong is left out (the pod is still shown).
            let Some(u) = usage(l, p) else { continue };
            if earliest.is_none_or(|e| u.ts_ns < e.ts_ns) {
                earliest = Some(u);
            }
            out.push((c.clone(), u));
        }
        Some((out, earliest?))
    }
}

/// The usage between two points of one node or container (None if its counters went back
/// or no time passed).
pub fn usage(last: &Point, prev: &Point) -> Option<Usage> {
    if last.start_ns < prev.start_ns || last.cpu < prev.cpu || last.ts_ns <= prev.ts_ns {
        return None;
    }
    let window = (last.ts_ns - prev.ts_ns) as u128;
    let cpu = ((last.cpu - prev.cpu) as u128 * 1_000_000_000 / window) as u64;
    Some(Usage {
        cpu_nano_cores: cpu,
        memory: last.memory,
        ts_ns: last.ts_ns,
        window_ns: window as u64,
    })
}

/// The scrapes the API server keeps.
#[derive(Default)]
pub struct MetricsApi {
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    scraped: Option<Instant>,
    points: Arc<Points>,
}

/// Whether the request is for the metrics API.
pub fn handles(info: &RequestInfo) -> bool {
    info.is_resource && info.group == GROUP
}

/// Serve a metrics API request (already authorized).
pub async fn serve(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    query: &Query,
    info: &RequestInfo,
) -> Response<Body> {
    serve_inner(api, parts, query, info)
        .await
        .unwrap_or_else(|e| error_response(&e))
}

async fn serve_inner(
    api: &Arc<ApiServer>,
    parts: &http::request::Parts,
    query: &Query,
    info: &RequestInfo,
) -> ApiResult<Response<Body>> {
    let resource = match (info.version.as_str(), info.resource.as_str()) {
        (VERSION, "nodes") => &NODE_METRICS,
        (VERSION, "pods") => &POD_METRICS,
        _ => return Err(ApiError::not_found_path()),
    };
    if !info.subresource.is_empty()
        || (!resource.namespaced && !info.namespace.is_empty())
        || (resource.namespaced && info.namespace.is_empty() && !info.name.is_empty())
    {
        return Err(ApiError::not_found_path());
    }
    if info.verb == "watch" {
        // Served without a watch, as metrics-server's storage has none.
        let mut e = ApiError::method_not_allowed(format!(
            "watch is not supported on resources of kind \"{}.{GROUP}\"",
            resource.plural
        ));
        e.details = Some(json!({"group": GROUP, "kind": resource.plural}));
        return Err(e);
    }
    if !matches!(info.verb.as_str(), "get" | "list") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let accept = parts
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let output = negotiate(accept, query)?;
    let labels = query.str("labelSelector");
    let fields = parse_fields(query.str("fieldSelector"))?;
    let points = api.metrics_api.points(api).await;
    let now = SystemTime::now();
    let items: Vec<Value> = if resource.namespaced {
        pod_items(api, &points, info, labels, fields.as_ref(), now)?
    } else {
        node_items(api, &points, info, labels, fields.as_ref(), now)?
    };
    if !info.name.is_empty() {
        let Some(mut item) = items.into_iter().next() else {
            return Err(no_metrics(resource, &info.namespace, &info.name));
        };
        if let Output::Table(include) = output {
            return Ok(value_response(200, &table(resource, &[item], include)));
        }
        if let Value::Object(m) = &mut item {
            let mut typed = Map::new();
            typed.insert("kind".into(), json!(resource.kind));
            typed.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
            typed.extend(std::mem::take(m));
            *m = typed;
        }
        return Ok(value_response(200, &item));
    }
    if let Output::Table(include) = output {
        return Ok(value_response(200, &table(resource, &items, include)));
    }
    Ok(value_response(
        200,
        &json!({
            "kind": format!("{}List", resource.kind),
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "metadata": {},
            "items": items,
        }),
    ))
}

/// metrics-server's answer for an object that exists but has no metrics yet.
fn no_metrics(resource: &ResourceInfo, ns: &str, name: &str) -> ApiError {
    let shown = if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    };
    let mut e = ApiError::new(
        404,
        "NotFound",
        format!(
            "{}.{GROUP} \"{shown}\" not found",
            resource.kind.to_lowercase()
        ),
    );
    e.details = Some(json!({"name": shown, "group": GROUP, "kind": resource.kind.to_lowercase()}));
    e
}

/// A lister's answer for a node or pod that does not exist (`node "x" not found`).
fn lister_not_found(kind: &str, name: &str) -> ApiError {
    let mut e = ApiError::new(404, "NotFound", format!("{kind} \"{name}\" not found"));
    e.details = Some(json!({"name": name, "kind": kind}));
    e
}

fn parse_fields(s: &str) -> ApiResult<Option<FieldSelector>> {
    if s.trim().is_empty() {
        return Ok(None);
    }
    FieldSelector::parse(s)
        .map(Some)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

fn objects(api: &ApiServer, plural: &str, namespace: &str, labels: &str) -> ApiResult<Vec<Value>> {
    let reg = api
        .registry("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("no {plural} registry")))?;
    let filter = Filter::new(reg.info, namespace, labels, "")?;
    let (objs, _) = reg.cache.list(&filter);
    Ok(objs.iter().filter_map(|o| o.value()).collect())
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn selected(fields: Option<&FieldSelector>, obj: &Value) -> bool {
    fields.is_none_or(|f| {
        f.matches(|field| match field {
            "metadata.name" => Some(meta_str(obj, "name")),
            "metadata.namespace" => Some(meta_str(obj, "namespace")),
            _ => None,
        })
    })
}

fn usage_json(u: &Usage) -> Value {
    json!({"cpu": format_cpu(u.cpu_nano_cores), "memory": format_memory(u.memory)})
}

fn metadata(obj: &Value, now: SystemTime, namespaced: bool) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(meta_str(obj, "name")));
    if namespaced {
        m.insert("namespace".into(), json!(meta_str(obj, "namespace")));
    }
    m.insert(
        "creationTimestamp".into(),
        json!(capstan_api::meta::format_time(now)),
    );
    if let Some(l) = obj
        .at("/metadata/labels")
        .filter(|l| l.as_object().is_some_and(|o| !o.is_empty()))
    {
        m.insert("labels".into(), l.clone());
    }
    Value::Object(m)
}

fn time_of(ns: i128) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(ns.clamp(0, u64::MAX as i128) as u64);
    capstan_api::meta::format_time(t)
}

fn node_items(
    api: &ApiServer,
    points: &Points,
    info: &RequestInfo,
    labels: &str,
    fields: Option<&FieldSelector>,
    now: SystemTime,
) -> ApiResult<Vec<Value>> {
    let mut nodes = if info.name.is_empty() {
        objects(api, "nodes", "", labels)?
            .into_iter()
            .filter(|n| selected(fields, n))
            .collect()
    } else {
        let found = objects(api, "nodes", "", "")?
            .into_iter()
            .find(|n| meta_str(n, "name") == info.name);
        vec![found.ok_or_else(|| lister_not_found("node", &info.name))?]
    };
    nodes.sort_by(|a, b| meta_str(a, "name").cmp(meta_str(b, "name")));
    Ok(nodes
        .iter()
        .filter_map(|n| {
            let u = points.node(meta_str(n, "name"))?;
            Some(json!({
                "metadata": metadata(n, now, false),
                "timestamp": time_of(u.ts_ns),
                "window": go_duration(u.window_ns),
                "usage": usage_json(&u),
            }))
        })
        .collect())
}

fn container_names(pod: &Value) -> Vec<String> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| pod.at(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

fn pod_items(
    api: &ApiServer,
    points: &Points,
    info: &RequestInfo,
    labels: &str,
    fields: Option<&FieldSelector>,
    now: SystemTime,
) -> ApiResult<Vec<Value>> {
    let mut pods: Vec<Value> = if info.name.is_empty() {
        objects(api, "pods", &info.namespace, labels)?
            .into_iter()
            .filter(|p| selected(fields, p))
            .collect()
    } else {
        let found = objects(api, "pods", &info.namespace, "")?
            .into_iter()
            .find(|p| meta_str(p, "name") == info.name);
        vec![found.ok_or_else(|| lister_not_found("pod", &info.name))?]
    };
    pods.sort_by(|a, b| {
        (meta_str(a, "namespace"), meta_str(a, "name"))
            .cmp(&(meta_str(b, "namespace"), meta_str(b, "name")))
    });
    Ok(pods
        .iter()
        .filter(|p| p.at("/status/phase").and_then(Value::as_str) == Some("Running"))
        .filter_map(|p| {
            let (mut containers, t) = points.pod(meta_str(p, "namespace"), meta_str(p, "name"))?;
            // In the pod's order (init/sidecar containers first), then by name.
            let order = container_names(p);
            containers.sort_by_key(|(c, _)| {
                (
                    order.iter().position(|o| o == c).unwrap_or(usize::MAX),
                    c.clone(),
                )
            });
            let cs: Vec<Value> = containers
                .iter()
                .map(|(c, u)| json!({"name": c, "usage": usage_json(u)}))
                .collect();
            Some(json!({
                "metadata": metadata(p, now, true),
                "timestamp": time_of(t.ts_ns),
                "window": go_duration(t.window_ns),
                "containers": cs,
            }))
        })
        .collect())
}

/// metrics-server's Table: Name, the usage columns (cpu, memory; a pod's summed over its
/// containers) and Window.
fn table(resource: &ResourceInfo, items: &[Value], include: IncludeObject) -> Value {
    let column = |name: &str, format: &str| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0});
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name of the resource", "priority": 0}),
    ];
    if !items.is_empty() {
        defs.push(column("cpu", "quantity"));
        defs.push(column("memory", "quantity"));
        defs.push(column("Window", "duration"));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let (cpu, memory) = if resource.namespaced {
                let cs = item.get("containers").and_then(Value::as_array);
                let sum = |k: &str, parse: fn(&str) -> Option<u64>| -> u64 {
                    cs.into_iter()
                        .flatten()
                        .filter_map(|c| c.at(&format!("/usage/{k}"))?.as_str())
                        .filter_map(parse)
                        .sum()
                };
                (
                    format_cpu(sum("cpu", parse_nano_cores)),
                    format_memory(sum("memory", parse_bytes)),
                )
            } else {
                let s = |k: &str| {
                    item.at(&format!("/usage/{k}"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                (s("cpu"), s("memory"))
            };
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
                IncludeObject::Object => {
                    let mut o = item.clone();
                    if let Value::Object(m) = &mut o {
                        m.insert("kind".into(), json!(resource.kind));
                        m.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
                    }
                    o
                }
            };
            json!({
                "cells": [item.at("/metadata/name").cloned().unwrap_or(Value::Null), cpu, memory, item.get("window").cloned().unwrap_or(Value::Null)],
                "object": object,
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

fn parse_nano_cores(s: &str) -> Option<u64> {
    let (num, mult): (&str, f64) = if let Some(n) = s.strip_suffix('n') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('u') {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('k') {
        (n, 1e12)
    } else {
        (s, 1e9)
    };
    num.parse::<f64>().ok().map(|v| (v * mult).round() as u64)
}

fn parse_bytes(s: &str) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 5] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
    ];
    for (suffix, mult) in SUFFIXES {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<u64>().ok().map(|v| v * mult);
        }
    }
    if let Some(n) = s.strip_suffix('k') {
        return n.parse::<u64>().ok().map(|v| v * 1000);
    }
    s.parse().ok()
}

impl MetricsApi {
    /// The points to answer with: the kept ones while fresh, else a new scrape's.
    async fn points(&self, api: &Arc<ApiServer>) -> Arc<Points> {
        let mut st = self.state.lock().await;
        if st.scraped.is_some_and(|t| t.elapsed() < RESOLUTION) {
            return st.points.clone();
        }
        let mut points = std::mem::take(&mut st.points);
        let p = Arc::make_mut(&mut points);
        p.store(scrape(api).await);
        if p.incomplete() {
            tokio::time::sleep(SECOND_SCRAPE_AFTER).await;
            p.store(scrape(api).await);
        }
        st.points = points;
        st.scraped = Some(Instant::now());
        st.points.clone()
    }
}

fn node_ready(node: &Value) -> bool {
    node.at("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Scrape every Ready node's kubelet at once; a node that fails is left out.
async fn scrape(api: &Arc<ApiServer>) -> Batch {
    let nodes = objects(api, "nodes", "", "").unwrap_or_default();
    let tasks = nodes.into_iter().filter(node_ready).map(|node| {
        let api = api.clone();
        async move {
            let name = meta_str(&node, "name").to_string();
            match tokio::time::timeout(SCRAPE_TIMEOUT, scrape_node(&api, &node)).await {
                Ok(Ok(text)) => Some((name, text)),
                Ok(Err(e)) => {
                    tracing::debug!(node = %name, error = %e, "failed scraping node");
                    None
                }
                Err(_) => {
                    tracing::debug!(node = %name, "scraping node timed out");
                    None
                }
            }
        }
    });
    let results = futures::future::join_all(tasks).await;
    let now = unix_nanos(SystemTime::now());
    let mut batch = Batch::default();
    for (node, text) in results.into_iter().flatten() {
        decode(&node, &text, now, &mut batch);
    }
    batch
}

async fn scrape_node(api: &ApiServer, node: &Value) -> Result<String, String> {
    let target = target_of(node).map_err(|e| e.message)?;
    let host = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let req = Request::builder()
        .method(Method::GET)
        .uri("/metrics/resource")
        .header(http::header::HOST, host)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = send(api, &target, req).await?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("request failed, status: {status}"));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn unix_nanos(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// One sample of Prometheus' text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Milliseconds since the epoch, when given.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }
}

/// Parse one line of Prometheus' text format (None for comments, blank or bad lines).
pub fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let end = loop {
            // Skip separators.
            while let Some((_, c)) = chars.peek() {
                if *c == ',' || c.is_whitespace() {
                    chars.next();
                } else {
                    break;
                }
            }
            let (i, c) = chars.next()?;
            if c == '}' {
                break i + 1;
            }
            let mut key = String::from(c);
            loop {
                let (_, c) = chars.next()?;
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    other => value.push(other),
                }
            }
            labels.push((key.trim().to_string(), value));
        };
        rest = &r[end..];
    }
    let mut fields = rest.split_whitespace();
    let value = match fields.next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().ok()?,
    };
    let timestamp_ms = fields.next().and_then(|t| t.parse::<i64>().ok());
    Some(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

fn seconds_to_ns(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        (v * 1e9) as u64
    } else {
        0
    }
}

/// Add a node's `/metrics/resource` to the batch: the node's point and its containers'
/// (those with both CPU and memory). Points without a time get `now` (ns).
pub fn decode(node: &str, text: &str, now: i128, batch: &mut Batch) {
    let ts = |s: &Sample| {
        s.timestamp_ms
            .map(|ms| i128::from(ms) * 1_000_000)
            .unwrap_or(now)
    };
    let mut node_cpu = None;
    let mut node_mem = None;
    #[derive(Default)]
    struct C {
        cpu: Option<(u64, i128)>,
        mem: Option<u64>,
        start: i128,
    }
    let mut containers: HashMap<(String, String, String), C> = HashMap::new();
    for s in text.lines().filter_map(parse_sample) {
        if !s.value.is_finite() {
            continue;
        }
        match s.name.as_str() {
            "node_cpu_usage_seconds_total" => node_cpu = Some((seconds_to_ns(s.value), ts(&s))),
            "node_memory_working_set_bytes" => node_mem = Some(s.value.max(0.0) as u64),
            "container_cpu_usage_seconds_total"
            | "container_memory_working_set_bytes"
            | "container_start_time_seconds" => {
                let key = (
                    s.label("namespace").to_string(),
                    s.label("pod").to_string(),
                    s.label("container").to_string(),
                );
                if key.0.is_empty() || key.1.is_empty() || key.2.is_empty() {
                    continue;
                }
                let c = containers.entry(key).or_default();
                match s.name.as_str() {
                    "container_cpu_usage_seconds_total" => {
                        c.cpu = Some((seconds_to_ns(s.value), ts(&s)))
                    }
                    "container_memory_working_set_bytes" => c.mem = Some(s.value.max(0.0) as u64),
                    _ => c.start = (s.value.max(0.0) * 1e9) as i128,
                }
            }
            _ => {}
        }
    }
    if let (Some((cpu, ts_ns)), Some(memory)) = (node_cpu, node_mem) {
        batch.nodes.insert(
            node.to_string(),
            Point {
                start_ns: 0,
                ts_ns,
                cpu,
                memory,
            },
        );
    }
    let mut seen: HashSet<PodKey> = HashSet::new();
    for ((ns, pod, container), c) in containers {
        let (Some((cpu, ts_ns)), Some(memory)) = (c.cpu, c.mem) else {
            continue;
        };
        let key = (ns, pod);
        seen.insert(key.clone());
        batch.pods.entry(key).or_default().insert(
            container,
            Point {
                start_ns: c.start,
                ts_ns,
                cpu,
                memory,
            },
        );
    }
}

/// CPU in nanocores as metrics-server writes it: a decimal quantity of scale -9, in its
/// canonical form ("123456789n", "12m", "1500m", "2").
pub fn format_cpu(nano_cores: u64) -> String {
    if nano_cores == 0 {
        return "0".into();
    }
    let mut mantissa = nano_cores;
    let mut exp: i32 = -9;
    while mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exp += 1;
    }
    // Down to an exponent that is a multiple of three.
    while exp.rem_euclid(3) != 0 {
        mantissa *= 10;
        exp -= 1;
    }
    let suffix = match exp {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    format!("{mantissa}{suffix}")
}

/// Memory in bytes as a binary quantity in its canonical form ("1234Ki", "3Mi", "1500").
pub fn format_memory(bytes: u64) -> String {
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut n = bytes;
    let mut i = 0;
    while n.is_multiple_of(1024) && i < 6 {
        n /= 1024;
        i += 1;
    }
    let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
    format!("{n}{suffix}")
}

/// A duration as Go's time.Duration.String writes it ("15.012s", "1m0s", "500ms").
pub fn go_duration(ns: u64) -> String {
    fn frac(v: u64, unit: u64, digits: usize) -> String {
        let whole = v / unit;
        let rest = v % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let f = format!("{rest:0digits$}");
            format!("{whole}.{}", f.trim_end_matches('0'))
        }
    }
    match ns {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}µs", frac(n, 1_000, 3)),
        n if n < 1_000_000_000 => format!("{}ms", frac(n, 1_000_000, 6)),
        n => {
            let secs = n / 1_000_000_000;
            let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
            let mut out = String::new();
            if h > 0 {
                out.push_str(&format!("{h}h"));
            }
            if h > 0 || m > 0 {
                out.push_str(&format!("{m}m"));
            }
            out.push_str(&frac(
                s * 1_000_000_000 + n % 1_000_000_000,
                1_000_000_000,
                9,
            ));
            out.push('s');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical() {
        assert_eq!(format_cpu(0), "0");
        assert_eq!(format_cpu(123_456_789), "123456789n");
        assert_eq!(format_cpu(12_000_000), "12m");
        assert_eq!(format_cpu(1_500_000_000), "1500m");
        assert_eq!(format_cpu(2_000_000_000), "2");
        assert_eq!(format_cpu(1_230), "1230n");
        assert_eq!(format_cpu(5_000), "5u");
        assert_eq!(format_memory(0), "0");
        assert_eq!(format_memory(512), "512");
        assert_eq!(format_memory(1536), "1536");
        assert_eq!(format_memory(1234 * 1024), "1234Ki");
        assert_eq!(format_memory(3 << 20), "3Mi");
        assert_eq!(format_memory(1 << 30), "1Gi");
        assert_eq!(parse_nano_cores("12m"), Some(12_000_000));
        assert_eq!(parse_nano_cores("2"), Some(2_000_000_000));
        assert_eq!(parse_nano_cores("7n"), Some(7));
        assert_eq!(parse_bytes("3Mi"), Some(3 << 20));
        assert_eq!(parse_bytes("100"), Some(100));
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(999), "999ns");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(500_000_000), "500ms");
        assert_eq!(go_duration(15_012_000_000), "15.012s");
        assert_eq!(go_duration(10_000_000_000), "10s");
        assert_eq!(go_duration(60_000_000_000), "1m0s");
        assert_eq!(go_duration(3_725_500_000_000), "1h2m5.5s");
    }

    #[test]
    fn prometheus_lines_parse() {
        let s = parse_sample(
            r#"container_cpu_usage_seconds_total{container="app",namespace="default",pod="we\"b"} 2.5 1700000100000"#,
        )
        .unwrap();
        assert_eq!(s.name, "container_cpu_usage_seconds_total");
        assert_eq!(s.label("pod"), "we\"b");
        assert_eq!(s.label("container"), "app");
        assert_eq!(s.value, 2.5);
        assert_eq!(s.timestamp_ms, Some(1_700_000_100_000));
        let s = parse_sample("node_memory_working_set_bytes 2e+09 17").unwrap();
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 2e9);
        assert_eq!(
            parse_sample("resource_scrape_error 0")
                .unwrap()
                .timestamp_ms,
            None
        );
        assert!(parse_sample("# HELP x y").is_none());
        assert!(parse_sample("x{a=\"b\" 1").is_none());
        assert!(parse_sample("x{a=b} 1").is_none());
        assert!(parse_sample("x nope").is_none());
    }

    const TEXT: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 2.5 1700000100000
container_cpu_usage_seconds_total{container="lonely",namespace="default",pod="web"} 1 1700000100000
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 4096 1700000100000
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.700000001e+09 1700000001000
node_cpu_usage_seconds_total 12 1700000200000
node_memory_working_set_bytes 2e+09 1700000200000
resource_scrape_error 0
"#;

    #[test]
    fn resource_metrics_decode_into_points() {
        let mut b = Batch::default();
        decode("n1", TEXT, 5, &mut b);
        assert_eq!(
            b.nodes["n1"],
            Point {
                start_ns: 0,
                ts_ns: 1_700_000_200_000_000_000,
                cpu: 12_000_000_000,
                memory: 2_000_000_000
            }
        );
        let pod = &b.pods[&("default".to_string(), "web".to_string())];
        // A container without memory is left out.
        assert_eq!(pod.len(), 1);
        assert_eq!(
            pod["app"],
            Point {
                start_ns: 1_700_000_001_000_000_000,
                ts_ns: 1_700_000_100_000_000_000,
                cpu: 2_500_000_000,
                memory: 4096
            }
        );
    }

    fn p(start: i128, ts_s: i128, cpu: u64, memory: u64) -> Point {
        Point {
            start_ns: start,
            ts_ns: ts_s * 1_000_000_000,
            cpu,
            memory,
        }
    }

    fn batch(node: Point, container: Point) -> Batch {
        let mut b = Batch::default();
        b.nodes.insert("n1".into(), node);
        b.pods
            .entry(("ns".into(), "web".into()))
            .or_default()
            .insert("app".into(), container);
        b
    }

    #[test]
    fn rates_come_from_the_last_two_scrapes() {
        let mut pts = Points::default();
        pts.store(batch(p(0, 100, 1_000, 10), p(1, 100, 0, 5)));
        assert!(pts.incomplete());
        assert_eq!(pts.node("n1"), None);
        assert_eq!(pts.pod("ns", "web"), None);
        // Ten seconds later: 5 core-seconds on the node, 1.2 on the container.
        pts.store(batch(
            p(0, 110, 5_000_001_000, 2048),
            p(1, 110, 1_200_000_000, 4096),
        ));
        assert!(!pts.incomplete());
        let n = pts.node("n1").unwrap();
        assert_eq!(n.cpu_nano_cores, 500_000_000);
        assert_eq!(n.memory, 2048);
        assert_eq!(n.window_ns, 10_000_000_000);
        assert_eq!(format_cpu(n.cpu_nano_cores), "500m");
        let (cs, t) = pts.pod("ns", "web").unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].1.cpu_nano_cores, 120_000_000);
        assert_eq!(t.ts_ns, 110_000_000_000);
        // A scrape with the same time keeps the previous point.
        pts.store(batch(
            p(0, 110, 5_000_001_000, 2048),
            p(1, 110, 1_200_000_000, 4096),
        ));
        assert_eq!(pts.node("n1").unwrap().cpu_nano_cores, 500_000_000);
        // A restarted container (started after the last point) starts over.
        pts.store(batch(
            p(0, 120, 6_000_001_000, 2048),
            p(115_000_000_000, 120, 1, 1),
        ));
        assert_eq!(pts.node("n1").unwrap().cpu_nano_cores, 100_000_000);
        assert_eq!(pts.pod("ns", "web"), None);
        // A node missing from a scrape is forgotten.
        pts.store(Batch::default());
        assert_eq!(pts.node("n1"), None);
    }

    #[test]
    fn counters_that_go_back_give_no_usage() {
        assert_eq!(usage(&p(0, 10, 5, 1), &p(0, 5, 10, 1)), None);
        assert_eq!(usage(&p(0, 10, 5, 1), &p(0, 10, 1, 1)), None);
        assert_eq!(usage(&p(0, 10, 5, 1), &p(3, 5, 1, 1)), None);
        let u = usage(&p(0, 12, 3_000_000_000, 7), &p(0, 10, 1_000_000_000, 1)).unwrap();
        assert_eq!(
            (u.cpu_nano_cores, u.memory, u.window_ns),
            (1_000_000_000, 7, 2_000_000_000)
        );
    }

    #[test]
    fn not_found_errors_read_as_metrics_server_s() {
        let e = no_metrics(&NODE_METRICS, "", "n1");
        assert_eq!(e.code, 404);
        assert_eq!(e.message, r#"nodemetrics.metrics.k8s.io "n1" not found"#);
        let e = no_metrics(&POD_METRICS, "default", "web");
        assert_eq!(
            e.message,
            r#"podmetrics.metrics.k8s.io "default/web" not found"#
        );
        assert_eq!(lister_not_found("pod", "x").message, r#"pod "x" not found"#);
    }

    #[test]
    fn tables_sum_a_pod_s_containers() {
        let item = json!({"metadata": {"name": "web", "namespace": "d"}, "window": "10s",
            "containers": [{"name": "a", "usage": {"cpu": "12m", "memory": "1Mi"}},
                           {"name": "b", "usage": {"cpu": "500000n", "memory": "1024Ki"}}]});
        let t = table(&POD_METRICS, &[item], IncludeObject::Metadata);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["web", "12500u", "2Mi", "10s"])
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "cpu", "memory", "Window"]);
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web");
    }

    #[test]
    fn discovery_lists_the_group_last() {
        let mut custom: Vec<&'static ResourceInfo> = Vec::new();
        custom.extend(RESOURCES);
        let list = crate::discovery::api_resource_list(&custom, GROUP, VERSION).unwrap();
        let kinds: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["NodeMetrics", "PodMetrics"]);
        let groups = crate::discovery::api_group_list(&custom);
        let last = groups["groups"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["name"], GROUP);
        assert_eq!(last["preferredVersion"]["version"], VERSION);
    }
}
