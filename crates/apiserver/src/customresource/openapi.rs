//! OpenAPI v3 documents of the served custom resources, one per group version at
//! `/openapi/v3/apis/<group>/<version>`, listed in the `/openapi/v3` index beside the built-in
//! ones: `kubectl explain` and client generators see a custom kind as they see a built-in one.
//!
//! As Kubernetes publishes them: each kind's schema is its version's `openAPIV3Schema` under
//! the name `<reversed group>.<version>.<Kind>`, with `apiVersion`, `kind` and `metadata`
//! (a reference to ObjectMeta) standing in for whatever the definition said of them, and
//! `x-kubernetes-group-version-kind`; a `<Kind>List` schema beside it; and the meta/v1
//! schemas those refer to, so that each document stands alone.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use capstan_api::meta::At as _;
use serde_json::{json, Map, Value};

const REF: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

/// A published document and its content hash (the index's `?hash=`).
#[derive(Clone, Debug)]
pub struct Doc {
    pub bytes: Bytes,
    pub hash: String,
}

/// The documents of `crds` (established definitions), by path (`apis/<group>/<version>`).
/// Versions that are not served, or whose URL a built-in resource owns, are left out.
pub fn documents(crds: &[&Value]) -> HashMap<String, Doc> {
    let mut schemas: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for crd in crds {
        let Some(spec) = crd.get("spec") else {
            continue;
        };
        let group = spec.get("group").and_then(Value::as_str).unwrap_or("");
        let names = crd
            .at("/status/acceptedNames")
            .filter(|n| {
                n.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| !k.is_empty())
            })
            .or_else(|| spec.get("names"));
        let name = |k: &str| {
            names
                .and_then(|n| n.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (kind, plural) = (name("kind"), name("plural"));
        let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
        let list_kind = match name("listKind") {
            l if l.is_empty() => format!("{kind}List"),
            l => l,
        };
        if group.is_empty() || kind.is_empty() {
            continue;
        }
        for v in spec
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let version = v.get("name").and_then(Value::as_str).unwrap_or("");
            if v.get("served").and_then(Value::as_bool) != Some(true)
                || capstan_api::catalogue::find(group, version, &plural).is_some()
            {
                continue;
            }
            let schema = v
                .at("/schema/openAPIV3Schema")
                .or_else(|| spec.at("/validation/openAPIV3Schema"))
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            let out = schemas
                .entry(format!("apis/{group}/{version}"))
                .or_default();
            let base = format!("{}.{version}.", reversed(group));
            out.insert(
                format!("{base}{kind}"),
                object_schema(schema, group, version, &kind),
            );
            out.insert(
                format!("{base}{list_kind}"),
                list_schema(&format!("{base}{kind}"), group, version, &kind, &list_kind),
            );
            let r = Resource {
                group,
                version,
                plural: &plural,
                kind: &kind,
                namespaced,
                item: format!("{base}{kind}"),
                list: format!("{base}{list_kind}"),
            };
            paths
                .entry(format!("apis/{group}/{version}"))
                .or_default()
                .extend(r.paths());
        }
    }
    if schemas.is_empty() {
        return HashMap::new();
    }
    let meta = meta_schemas();
    schemas
        .into_iter()
        .map(|(path, mut own)| {
            for (k, v) in &meta {
                own.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
                "paths": paths.remove(&path).unwrap_or_default(),
                "components": {"schemas": own},
            });
            let bytes = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
            let hash = capstan_api::openapi::content_hash(&bytes);
            (path, Doc { bytes, hash })
        })
        .collect()
}

/// One custom resource version, for its REST paths.
struct Resource<'a> {
    group: &'a str,
    version: &'a str,
    plural: &'a str,
    kind: &'a str,
    namespaced: bool,
    /// Schema names of the object and of its list.
    item: String,
    list: String,
}

impl Resource<'_> {
    /// The collection and item paths with their operations, each carrying the kind's
    /// `x-kubernetes-group-version-kind` (how `kubectl explain` finds a resource's schema).
    fn paths(&self) -> Map<String, Value> {
        let scope = if self.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let collection = format!(
            "/apis/{}/{}{scope}/{}",
            self.group, self.version, self.plural
        );
        let mut params = Vec::new();
        if self.namespaced {
            params.push(path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        let mut item_params = params.clone();
        item_params.push(path_param("name", &format!("name of the {}", self.kind)));
        let mut out = Map::new();
        out.insert(
            collection.clone(),
            json!({
                "get": self.op("list", &self.list),
                "post": self.op("post", &self.item),
                "delete": self.op("deletecollection", STATUS),
                "parameters": params,
            }),
        );
        out.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": self.op("get", &self.item),
                "put": self.op("put", &self.item),
                "patch": self.op("patch", &self.item),
                "delete": self.op("delete", STATUS),
                "parameters": item_params,
            }),
        );
        out
    }

    fn op(&self, action: &str, schema: &str) -> Value {
        let verb = match action {
            "get" => "read",
            "post" => "create",
            "put" => "replace",
            "deletecollection" => "deleteCollection",
            a => a,
        };
        let scope = if self.namespaced { "Namespaced" } else { "" };
        json!({
            "operationId": format!("{verb}{}{}{scope}{}", camel(self.group), camel(self.version), self.kind),
            "tags": [format!("{}_{}", self.group, self.version)],
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{REF}{schema}")}}}},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": self.group, "kind": self.kind, "version": self.version},
        })
    }
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

/// "stable.example.com" → "StableExampleCom", "v1beta1" → "V1beta1".
fn camel(s: &str) -> String {
    s.split(['.', '-'])
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// "stable.example.com" → "com.example.stable", as Kubernetes names definitions.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The standard `apiVersion`, `kind` and `metadata` properties of an object (`list`: of a
/// list), as the built-in kinds have them (ConfigMap's and ConfigMapList's).
fn standard_properties(list: bool) -> Map<String, Value> {
    let name = if list { "ConfigMapList" } else { "ConfigMap" };
    let builtin = capstan_api::openapi::v3("api/v1")
        .and_then(|mut d| {
            d.pointer_mut(&format!(
                "/components/schemas/io.k8s.api.core.v1.{name}/properties"
            ))
            .map(Value::take)
        })
        .unwrap_or_default();
    let meta = if list { LIST_META } else { OBJECT_META };
    let mut out = Map::new();
    for k in ["apiVersion", "kind", "metadata"] {
        let fallback = match k {
            "metadata" => json!({"allOf": [{"$ref": format!("{REF}{meta}")}], "default": {}}),
            _ => json!({"type": "string"}),
        };
        out.insert(k.to_string(), builtin.get(k).cloned().unwrap_or(fallback));
    }
    out
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

fn object_schema(mut schema: Value, group: &str, version: &str, kind: &str) -> Value {
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    let obj = schema.as_object_mut().expect("an object");
    let props = obj
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut props: Map<String, Value> = props;
    props.extend(standard_properties(false));
    obj.insert("properties".into(), Value::Object(props));
    obj.insert("type".into(), json!("object"));
    obj.insert(
        "x-kubernetes-group-version-kind".into(),
        gvk(group, version, kind),
    );
    schema
}

fn list_schema(item: &str, group: &str, version: &str, kind: &str, list_kind: &str) -> Value {
    let mut props = standard_properties(true);
    props.insert(
        "items".into(),
        json!({
            "description": format!("The {kind} objects of the list."),
            "type": "array",
            "items": {"$ref": format!("{REF}{item}")},
        }),
    );
    json!({
        "description": format!("{list_kind} is a list of {kind}."),
        "type": "object",
        "required": ["items"],
        "properties": props,
        "x-kubernetes-group-version-kind": gvk(group, version, list_kind),
    })
}

/// ObjectMeta, ListMeta, Status and every schema they refer to, from the built-in core/v1 document.
fn meta_schemas() -> Map<String, Value> {
    let all = capstan_api::openapi::v3("api/v1")
        .and_then(|mut d| d.pointer_mut("/components/schemas").map(Value::take))
        .unwrap_or_default();
    let mut out = Map::new();
    let mut todo = vec![
        OBJECT_META.to_string(),
        LIST_META.to_string(),
        STATUS.to_string(),
    ];
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = all.get(&name) else {
            continue;
        };
        refs(schema, &mut todo);
        out.insert(name, schema.clone());
    }
    out
}

/// Push the schema names `v` refers to.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x.as_str()) {
                    ("$ref", Some(r)) => {
                        if let Some(name) = r.strip_prefix(REF) {
                            out.push(name.to_string());
                        }
                    }
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "spec": {
                "group": "stable.example.com",
                "names": {"kind": "CronTab", "plural": "crontabs"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 9}}},
                            "spec": {"type": "object", "description": "What the tab runs.",
                                     "properties": {"cronSpec": {"type": "string"}}}}}}},
                    {"name": "v2", "served": false, "storage": false},
                ],
            },
            "status": {"acceptedNames": {"kind": "CronTab", "plural": "crontabs", "listKind": "CronTabList"}},
        })
    }

    #[test]
    fn a_served_version_is_published_with_its_schema_and_meta() {
        let crd = crd();
        let docs = documents(&[&crd]);
        assert_eq!(
            docs.keys().collect::<Vec<_>>(),
            ["apis/stable.example.com/v1"]
        );
        let d = &docs["apis/stable.example.com/v1"];
        assert_eq!(d.hash, capstan_api::openapi::content_hash(&d.bytes));
        let doc: Value = serde_json::from_slice(&d.bytes).unwrap();
        let schemas = &doc["components"]["schemas"];
        let tab = &schemas["com.example.stable.v1.CronTab"];
        assert_eq!(
            tab["x-kubernetes-group-version-kind"],
            json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
        );
        assert_eq!(
            tab["properties"]["spec"]["description"],
            "What the tab runs."
        );
        assert_eq!(
            tab["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("{REF}{OBJECT_META}"),
            "the definition's own metadata schema gives way to ObjectMeta"
        );
        assert_eq!(tab["properties"]["apiVersion"]["type"], "string");
        let list = &schemas["com.example.stable.v1.CronTabList"];
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            format!("{REF}com.example.stable.v1.CronTab")
        );
        // Every reference resolves inside the document.
        let mut names = Vec::new();
        refs(&doc, &mut names);
        for n in names {
            assert!(schemas.get(&n).is_some(), "{n} is not in the document");
        }
        assert!(schemas.get(OBJECT_META).is_some());
        let get = &doc["paths"]
            ["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]["get"];
        assert_eq!(get["x-kubernetes-group-version-kind"]["kind"], "CronTab");
        assert_eq!(
            get["operationId"],
            "readStableExampleComV1NamespacedCronTab"
        );
        assert_eq!(
            doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs"]["get"]
                ["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            format!("{REF}com.example.stable.v1.CronTabList")
        );
        assert!(schemas
            .get("io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry")
            .is_some());
    }

    #[test]
    fn nothing_served_publishes_nothing() {
        let mut crd = crd();
        crd["spec"]["versions"][0]["served"] = json!(false);
        assert!(documents(&[&crd]).is_empty());
        assert_eq!(reversed("a.b.c"), "c.b.a");
    }
}
