//! The OpenAPI documents the API server publishes: `/openapi/v2` (Swagger 2.0, one document)
//! and `/openapi/v3` (an index of per-group-version OpenAPI 3.0 documents), as kube-apiserver
//! lays them out, so that `kubectl explain`, kubectl's field-validation probe and client
//! generators find what they look for.
//!
//! Everything is built once, on first use, from the catalogue and the built-in schemas, and
//! kept only serialized: the parsed documents would hold several times as much memory
//! (~25 MB against ~5 MB) for as long as the server runs.
//!
//! What kubectl v1.32 reads:
//! - `kubectl explain` (default output) fetches `/openapi/v3`, then the group-version document
//!   named there; it finds the resource's GVK on an operation of the resource's path and the
//!   schema in `components.schemas` carrying that `x-kubernetes-group-version-kind`.
//! - Before a create/apply/replace with `--validate=strict` (the default) it looks for a PATCH
//!   operation with the kind's GVK and a `fieldValidation` query parameter, to let the server
//!   validate instead of validating client-side.
//! - Client-side `kubectl apply` computes a strategic merge patch from the v3 schemas when the
//!   kind's PATCH operation accepts `application/strategic-merge-patch+json`, else from its
//!   compiled-in types. The built-in schemas carry no patch strategies (k8s-openapi does not
//!   have them), so that media type is only advertised once [`set_patch_metadata`] supplies
//!   them: kubectl then patches exactly as against Kubernetes.
//! - `/openapi/v2` is served as JSON and, for client-go (which reads only that), as gnostic's
//!   OpenAPIv2 protobuf ([`v2proto`]).

mod paths;
#[cfg(test)]
mod tests;
pub mod v2proto;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::schema::{builtin_definitions, BuiltinDefinitions};
use paths::{Location, Operation, Param, Paths, Payload};

/// `info` of every document, as kube-apiserver writes it.
const TITLE: &str = "Kubernetes";
const INFO_VERSION: &str = "unversioned";

/// Where a property's strategic-merge-patch metadata comes from.
/// Arguments: definition name ("io.k8s.api.core.v1.PodSpec") and property ("containers").
/// Returns (x-kubernetes-patch-strategy, x-kubernetes-patch-merge-key).
pub type PatchMetadata = fn(&str, &str) -> Option<(&'static str, Option<&'static str>)>;

static PATCH_METADATA: OnceLock<PatchMetadata> = OnceLock::new();
static V2: OnceLock<Bytes> = OnceLock::new();
static V3: OnceLock<V3Docs> = OnceLock::new();

/// Supply patch strategies and merge keys for built-in types. Must be called before any
/// document is built; once set, PATCH operations also advertise
/// `application/strategic-merge-patch+json`. Returns false when it came too late.
pub fn set_patch_metadata(f: PatchMetadata) -> bool {
    if V2.get().is_some() || V3.get().is_some() {
        return false;
    }
    PATCH_METADATA.set(f).is_ok()
}

fn patch_metadata() -> Option<PatchMetadata> {
    PATCH_METADATA.get().copied()
}

/// The Swagger 2.0 document of `/openapi/v2` (parsed again at each call).
pub fn v2() -> Value {
    serde_json::from_slice(&v2_bytes()).expect("the document parses")
}

/// [`v2`], serialized.
pub fn v2_bytes() -> Bytes {
    V2.get_or_init(|| Bytes::from(serde_json::to_vec(&build_v2()).expect("JSON serializes")))
        .clone()
}

/// One `/openapi/v3/<path>` document.
struct V3Doc {
    bytes: Bytes,
    hash: String,
}

struct V3Docs {
    docs: BTreeMap<String, V3Doc>,
    index: Value,
    index_bytes: Bytes,
}

fn v3_docs() -> &'static V3Docs {
    V3.get_or_init(build_v3)
}

/// The `/openapi/v3` discovery document: `{"paths": {"api/v1": {"serverRelativeURL":
/// "/openapi/v3/api/v1?hash=…"}, …}}`.
pub fn v3_index() -> &'static Value {
    &v3_docs().index
}

/// [`v3_index`], serialized.
pub fn v3_index_bytes() -> Bytes {
    v3_docs().index_bytes.clone()
}

/// The OpenAPI 3.0 document at `/openapi/v3/<path>`: "api/v1", "apis/apps/v1", "api", "apis",
/// "apis/apps", "version" (parsed again at each call).
pub fn v3(path: &str) -> Option<Value> {
    v3_bytes(path).map(|b| serde_json::from_slice(&b).expect("the document parses"))
}

/// [`v3`], serialized.
pub fn v3_bytes(path: &str) -> Option<Bytes> {
    v3_docs()
        .docs
        .get(path.trim_matches('/'))
        .map(|d| d.bytes.clone())
}

/// The content hash of a v3 document, as its `serverRelativeURL` carries it (`?hash=`): an
/// ETag, and the key clients cache under.
pub fn v3_hash(path: &str) -> Option<&'static str> {
    v3_docs()
        .docs
        .get(path.trim_matches('/'))
        .map(|d| d.hash.as_str())
}

/// Every v3 document path, as the index lists them.
pub fn v3_paths() -> impl Iterator<Item = &'static str> {
    v3_docs().docs.keys().map(String::as_str)
}

/// A stable content hash: 128-bit FNV-1a, as 32 upper-case hex digits.
pub fn content_hash(bytes: &[u8]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h = OFFSET;
    for b in bytes {
        h ^= u128::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032X}")
}

// ---------------------------------------------------------------------------------------------
// Schemas

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavor {
    V2,
    V3,
}

impl Flavor {
    fn ref_prefix(self) -> &'static str {
        match self {
            Flavor::V2 => "#/definitions/",
            Flavor::V3 => "#/components/schemas/",
        }
    }
}

/// Calls `f` with every definition name a schema refers to.
fn refs_of(schema: &Value, f: &mut impl FnMut(&str)) {
    let Value::Object(m) = schema else { return };
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        f(crate::schema::ref_name(r));
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for p in props.values() {
            refs_of(p, f);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(s) = m.get(key) {
            refs_of(s, f);
        }
    }
    for key in ["allOf", "oneOf", "anyOf"] {
        if let Some(Value::Array(list)) = m.get(key) {
            for s in list {
                refs_of(s, f);
            }
        }
    }
}

/// The definitions reachable from `roots`, sorted.
fn closure(defs: &Map<String, Value>, roots: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = roots.into_iter().collect();
    while let Some(name) = todo.pop() {
        if !defs.contains_key(&name) || !seen.insert(name.clone()) {
            continue;
        }
        refs_of(&defs[&name], &mut |r| {
            if !seen.contains(r) {
                todo.push(r.to_string());
            }
        });
    }
    seen
}

/// Rewrite a schema for a document: refs to the document's prefix (in v3 a ref with siblings
/// becomes `allOf: [{$ref}]` beside them, as Kubernetes writes it), and patch metadata added
/// to the properties of `definition`.
fn convert(schema: &Value, flavor: Flavor, definition: Option<(&str, PatchMetadata)>) -> Value {
    let Value::Object(m) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        let converted = match k.as_str() {
            "properties" => match v {
                Value::Object(props) => {
                    let mut o = Map::new();
                    for (name, p) in props {
                        let mut c = convert(p, flavor, None);
                        if let (Some((def, meta)), Value::Object(cm)) = (definition, &mut c) {
                            if let Some((strategy, key)) = meta(def, name) {
                                cm.insert("x-kubernetes-patch-strategy".into(), strategy.into());
                                if let Some(key) = key {
                                    cm.insert("x-kubernetes-patch-merge-key".into(), key.into());
                                }
                            }
                        }
                        o.insert(name.clone(), c);
                    }
                    Value::Object(o)
                }
                other => other.clone(),
            },
            "items" | "additionalProperties" | "not" => convert(v, flavor, None),
            "allOf" | "oneOf" | "anyOf" => match v {
                Value::Array(list) => {
                    Value::Array(list.iter().map(|s| convert(s, flavor, None)).collect())
                }
                other => other.clone(),
            },
            "$ref" => match v.as_str() {
                Some(r) => Value::String(format!(
                    "{}{}",
                    flavor.ref_prefix(),
                    crate::schema::ref_name(r)
                )),
                None => v.clone(),
            },
            _ => v.clone(),
        };
        out.insert(k.clone(), converted);
    }
    if flavor == Flavor::V3 && out.len() > 1 {
        if let Some(r) = out.remove("$ref") {
            out.insert("allOf".into(), json!([{ "$ref": r }]));
        }
    }
    Value::Object(out)
}

/// `x-kubernetes-group-version-kind` of each definition that is a kind.
fn definition_gvks(defs: &BuiltinDefinitions) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let gvk = |g: &str, v: &str, k: &str| json!({"group": g, "version": v, "kind": k});
    for k in &defs.kinds {
        if ["DeleteOptions", "WatchEvent"].contains(&k.kind) {
            continue;
        }
        out.entry(k.definition.clone())
            .or_default()
            .push(gvk(k.group, k.version, k.kind));
        if let Some((list_kind, list_def)) = &k.list {
            out.entry(list_def.clone())
                .or_default()
                .push(gvk(k.group, k.version, list_kind));
        }
    }
    // Every group-version accepts DeleteOptions and streams WatchEvents.
    let mut gvs = paths::served_group_versions();
    if !gvs.contains(&("", "v1")) {
        gvs.push(("", "v1"));
    }
    gvs.sort();
    for (def, kind) in [
        (paths::DELETE_OPTIONS, "DeleteOptions"),
        (paths::WATCH_EVENT, "WatchEvent"),
    ] {
        out.insert(
            def.to_string(),
            gvs.iter().map(|(g, v)| gvk(g, v, kind)).collect(),
        );
    }
    out
}

/// (definition, field, required in Kubernetes v1.32) where k8s-openapi's `required` differs.
const REQUIRED_CORRECTIONS: &[(&str, &str, bool)] = &[
    ("io.k8s.api.apps.v1.StatefulSetSpec", "serviceName", true),
    ("io.k8s.api.events.v1.Event", "eventTime", true),
    (
        "io.k8s.api.networking.v1.NetworkPolicySpec",
        "podSelector",
        true,
    ),
    ("io.k8s.api.core.v1.ConfigMapEnvSource", "name", false),
    ("io.k8s.api.core.v1.ConfigMapKeySelector", "name", false),
    ("io.k8s.api.core.v1.ConfigMapProjection", "name", false),
    ("io.k8s.api.core.v1.ConfigMapVolumeSource", "name", false),
    ("io.k8s.api.core.v1.LocalObjectReference", "name", false),
    ("io.k8s.api.core.v1.SecretEnvSource", "name", false),
    ("io.k8s.api.core.v1.SecretKeySelector", "name", false),
    ("io.k8s.api.core.v1.SecretProjection", "name", false),
];

const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// Where k8s-openapi's rendering of a definition differs from the one kube-apiserver publishes
/// in form (not content), use the published form.
fn kubernetes_conventions(name: &str, m: &mut Map<String, Value>, flavor: Flavor) {
    // k8s-openapi marks `metadata` required on every kind (its Rust field is not optional);
    // in Kubernetes only core/v1 Event's is (its Go field lacks omitempty). `kubectl explain`
    // prints "-required-" from this list.
    if name != "io.k8s.api.core.v1.Event" {
        if let Some(Value::Array(req)) = m.get_mut("required") {
            req.retain(|r| r != "metadata");
            if req.is_empty() {
                m.remove("required");
            }
        }
    }
    // k8s-openapi also requires fields that merely have a default (its Rust field is then not
    // an Option), and relaxes a few required ones that servers were seen to omit.
    for (def, field, required) in REQUIRED_CORRECTIONS {
        if *def != name {
            continue;
        }
        let req = m
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = req {
            list.retain(|r| r != field);
            if *required {
                list.push((*field).into());
                list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
            if list.is_empty() {
                m.remove("required");
            }
        }
    }
    // int-or-string types: OpenAPI v2 has no unions, so they are strings with a format there;
    // v3 spells the union out.
    if name == INT_OR_STRING || name == QUANTITY {
        m.remove("x-kubernetes-int-or-string");
        match flavor {
            Flavor::V2 => {
                m.insert("type".into(), "string".into());
            }
            Flavor::V3 if name == INT_OR_STRING => {
                m.insert(
                    "oneOf".into(),
                    json!([{"type": "integer"}, {"type": "string"}]),
                );
            }
            Flavor::V3 => {
                m.insert(
                    "oneOf".into(),
                    json!([{"type": "string"}, {"type": "number"}]),
                );
            }
        }
        if name == INT_OR_STRING {
            m.insert("format".into(), "int-or-string".into());
        }
    }
}

/// The named definitions, converted, with their GVKs.
fn definitions(names: &BTreeSet<String>, flavor: Flavor) -> Map<String, Value> {
    let defs = builtin_definitions();
    let gvks = definition_gvks(defs);
    let mut out = Map::new();
    for name in names {
        let Some(schema) = defs.definitions.get(name) else {
            continue;
        };
        let mut c = convert(schema, flavor, patch_metadata().map(|m| (name.as_str(), m)));
        if let Value::Object(m) = &mut c {
            kubernetes_conventions(name, m, flavor);
            if let Some(g) = gvks.get(name) {
                m.insert(
                    "x-kubernetes-group-version-kind".into(),
                    Value::Array(g.clone()),
                );
            }
        }
        out.insert(name.clone(), c);
    }
    out
}

/// Every definition the operations use.
fn operation_roots(paths: &Paths) -> Vec<String> {
    let mut roots = Vec::new();
    for ops in paths.values() {
        for op in ops {
            if let Some((Payload::Definition(d), _)) = &op.body {
                roots.push(d.clone());
            }
            for r in &op.responses {
                if let Some((Payload::Definition(d), _)) = &r.body {
                    roots.push(d.clone());
                }
            }
        }
    }
    roots
}

// ---------------------------------------------------------------------------------------------
// Paths

fn gvk_value(op: &Operation) -> Option<Value> {
    op.gvk
        .as_ref()
        .map(|g| json!({"group": g.group, "version": g.version, "kind": g.kind}))
}

fn payload_schema(p: &Payload, flavor: Flavor) -> Value {
    match p {
        Payload::Definition(d) => json!({ "$ref": format!("{}{d}", flavor.ref_prefix()) }),
        Payload::Text => json!({"type": "string"}),
    }
}

fn param_v3(p: &Param) -> Value {
    let mut v = json!({
        "name": p.name,
        "in": p.location.as_str(),
        "description": p.description,
        "schema": {"type": p.ty, "uniqueItems": true},
    });
    if p.location == Location::Path {
        v["required"] = true.into();
    }
    v
}

fn param_v2(p: &Param) -> Value {
    let mut v = json!({
        "name": p.name,
        "in": p.location.as_str(),
        "description": p.description,
        "type": p.ty,
        "uniqueItems": true,
    });
    if p.location == Location::Path {
        v["required"] = true.into();
    }
    v
}

fn media_map(media: &[&str], schema: &Value) -> Value {
    Value::Object(
        media
            .iter()
            .map(|m| (m.to_string(), json!({ "schema": schema })))
            .collect(),
    )
}

fn operation_v3(op: &Operation) -> Value {
    let mut o = Map::new();
    o.insert("description".into(), op.description.clone().into());
    o.insert("operationId".into(), op.id.clone().into());
    if !op.params.is_empty() {
        o.insert(
            "parameters".into(),
            op.params.iter().map(param_v3).collect(),
        );
    }
    if let Some((payload, media)) = &op.body {
        o.insert(
            "requestBody".into(),
            json!({
                "content": media_map(media, &payload_schema(payload, Flavor::V3)),
                "required": true,
            }),
        );
    }
    let mut responses = Map::new();
    for r in &op.responses {
        let mut rv = json!({ "description": r.description });
        if let Some((payload, media)) = &r.body {
            rv["content"] = media_map(media, &payload_schema(payload, Flavor::V3));
        }
        responses.insert(r.code.into(), rv);
    }
    o.insert("responses".into(), Value::Object(responses));
    o.insert("tags".into(), json!([op.tag]));
    if let Some(action) = op.action {
        o.insert("x-kubernetes-action".into(), action.into());
    }
    if let Some(g) = gvk_value(op) {
        o.insert("x-kubernetes-group-version-kind".into(), g);
    }
    Value::Object(o)
}

fn operation_v2(op: &Operation) -> Value {
    let mut o = Map::new();
    let consumes: &[&str] = match &op.body {
        Some((_, media)) => media,
        None => paths::ANY_MEDIA,
    };
    o.insert("consumes".into(), json!(consumes));
    o.insert("description".into(), op.description.clone().into());
    o.insert("operationId".into(), op.id.clone().into());
    let mut params: Vec<Value> = Vec::new();
    if let Some((payload, _)) = &op.body {
        params.push(json!({
            "in": "body",
            "name": "body",
            "required": true,
            "schema": payload_schema(payload, Flavor::V2),
        }));
    }
    params.extend(op.params.iter().map(param_v2));
    if !params.is_empty() {
        o.insert("parameters".into(), Value::Array(params));
    }
    let produces: Vec<&str> = op
        .responses
        .iter()
        .filter_map(|r| r.body.as_ref().map(|(_, m)| *m))
        .next()
        .unwrap_or(paths::ANY_MEDIA)
        .to_vec();
    o.insert("produces".into(), json!(produces));
    let mut responses = Map::new();
    for r in &op.responses {
        let mut rv = json!({ "description": r.description });
        if let Some((payload, _)) = &r.body {
            rv["schema"] = payload_schema(payload, Flavor::V2);
        }
        responses.insert(r.code.into(), rv);
    }
    o.insert("responses".into(), Value::Object(responses));
    o.insert("schemes".into(), json!(["https"]));
    o.insert("tags".into(), json!([op.tag]));
    if let Some(action) = op.action {
        o.insert("x-kubernetes-action".into(), action.into());
    }
    if let Some(g) = gvk_value(op) {
        o.insert("x-kubernetes-group-version-kind".into(), g);
    }
    Value::Object(o)
}

fn render_paths(paths: &Paths, flavor: Flavor) -> Map<String, Value> {
    let mut out = Map::new();
    for (path, ops) in paths {
        let mut ops = ops.clone();
        let shared = paths::hoist(&mut ops);
        let mut item = Map::new();
        for op in &ops {
            let rendered = match flavor {
                Flavor::V2 => operation_v2(op),
                Flavor::V3 => operation_v3(op),
            };
            item.insert(op.method.into(), rendered);
        }
        if !shared.is_empty() {
            let render = match flavor {
                Flavor::V2 => param_v2,
                Flavor::V3 => param_v3,
            };
            item.insert("parameters".into(), shared.iter().map(render).collect());
        }
        out.insert(path.clone(), Value::Object(item));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Documents

/// Discovery endpoints: `/api/`, `/apis/`, `/apis/<group>/`, `/version/`.
fn discovery_paths() -> Vec<(String, Paths)> {
    let mut out = Vec::new();
    let one = |path: &str, op: Operation| {
        let mut p = Paths::new();
        p.insert(path.to_string(), vec![op]);
        p
    };
    out.push((
        "api".to_string(),
        one(
            "/api/",
            paths::discovery_op(
                "getCoreAPIVersions".into(),
                "Get the versions of the core API.",
                paths::API_VERSIONS,
                "core".into(),
            ),
        ),
    ));
    out.push((
        "apis".to_string(),
        one(
            "/apis/",
            paths::discovery_op(
                "getAPIVersions".into(),
                "Get the API groups and their versions.",
                paths::API_GROUP_LIST,
                "apis".into(),
            ),
        ),
    ));
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in paths::served_group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    for g in groups {
        let camel = paths::group_camel(g);
        let mut tag = paths::tag(g, "");
        tag.pop(); // "apps_" → "apps"
        out.push((
            format!("apis/{g}"),
            one(
                &format!("/apis/{g}/"),
                paths::discovery_op(
                    format!("get{camel}APIGroup"),
                    "Get the versions of the API group.",
                    paths::API_GROUP,
                    tag,
                ),
            ),
        ));
    }
    let mut version = one(
        "/version/",
        paths::discovery_op(
            "getCodeVersion".into(),
            "Get the version of the server.",
            paths::VERSION_INFO,
            "version".into(),
        ),
    );
    // The version endpoint answers JSON only.
    if let Some(op) = version.get_mut("/version/").and_then(|v| v.first_mut()) {
        op.responses[0].body = Some((
            Payload::Definition(paths::VERSION_INFO.into()),
            &["application/json"],
        ));
    }
    out.push(("version".to_string(), version));
    out
}

/// Every document's paths: discovery ones and one per served group-version.
fn all_paths() -> Vec<(String, Paths)> {
    let defs = builtin_definitions();
    let smp = patch_metadata().is_some();
    let mut out = discovery_paths();
    for (g, v) in paths::served_group_versions() {
        let key = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        out.push((key, paths::group_version_paths(defs, g, v, smp)));
    }
    out
}

fn security_scheme() -> Value {
    json!({
        "BearerToken": {
            "description": "Bearer Token authentication",
            "in": "header",
            "name": "authorization",
            "type": "apiKey",
        }
    })
}

fn build_v3() -> V3Docs {
    let defs = builtin_definitions();
    let mut docs = BTreeMap::new();
    for (key, paths) in all_paths() {
        let names = closure(&defs.definitions, operation_roots(&paths));
        let doc = json!({
            "openapi": "3.0.0",
            "info": {"title": TITLE, "version": INFO_VERSION},
            "paths": render_paths(&paths, Flavor::V3),
            "components": {
                "schemas": definitions(&names, Flavor::V3),
                "securitySchemes": security_scheme(),
            },
        });
        let bytes = Bytes::from(serde_json::to_vec(&doc).expect("JSON serializes"));
        let hash = content_hash(&bytes);
        docs.insert(key, V3Doc { bytes, hash });
    }
    let index = json!({
        "paths": docs
            .iter()
            .map(|(k, d)| (
                k.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{k}?hash={}", d.hash)}),
            ))
            .collect::<Map<String, Value>>(),
    });
    let index_bytes = Bytes::from(serde_json::to_vec(&index).expect("JSON serializes"));
    V3Docs {
        docs,
        index,
        index_bytes,
    }
}

fn build_v2() -> Value {
    let defs = builtin_definitions();
    let mut all = Paths::new();
    for (_, paths) in all_paths() {
        all.extend(paths);
    }
    let names = closure(&defs.definitions, operation_roots(&all));
    json!({
        "swagger": "2.0",
        "info": {"title": TITLE, "version": INFO_VERSION},
        "paths": render_paths(&all, Flavor::V2),
        "definitions": definitions(&names, Flavor::V2),
        "security": [{"BearerToken": []}],
        "securityDefinitions": security_scheme(),
    })
}
