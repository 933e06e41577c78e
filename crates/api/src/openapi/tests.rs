use serde_json::{json, Value};

use super::*;
use crate::catalogue::RESOURCES;

fn gvk_list(schema: &Value) -> Vec<(String, String, String)> {
    schema["x-kubernetes-group-version-kind"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|g| {
                    (
                        g["group"].as_str().unwrap().to_string(),
                        g["version"].as_str().unwrap().to_string(),
                        g["kind"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `CAPSTAN_OPENAPI_DUMP=<dir> cargo test -p capstan-api dump_for_comparison` writes every
/// document under the file names kube-apiserver's published spec uses, to diff against it.
#[test]
fn dump_for_comparison() {
    let Ok(dir) = std::env::var("CAPSTAN_OPENAPI_DUMP") else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    for p in v3_paths() {
        let name = format!("{}/{}_openapi.json", dir, p.replace('/', "__"));
        std::fs::write(name, v3_bytes(p).unwrap()).unwrap();
    }
    std::fs::write(format!("{dir}/swagger.json"), v2_bytes()).unwrap();
}

fn gvk(group: &str, version: &str, kind: &str) -> (String, String, String) {
    (group.into(), version.into(), kind.into())
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every `$ref` in `v` (any depth).
fn all_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => all_refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all_refs(x, out)),
        _ => {}
    }
}

#[test]
fn v2_has_kind_definitions_with_their_gvk() {
    let doc = v2();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(doc["info"]["title"], "Kubernetes");
    let defs = doc["definitions"].as_object().unwrap();
    assert_eq!(
        gvk_list(&defs["io.k8s.api.core.v1.Pod"]),
        vec![gvk("", "v1", "Pod")]
    );
    assert_eq!(
        gvk_list(&defs["io.k8s.api.core.v1.PodList"]),
        vec![gvk("", "v1", "PodList")]
    );
    assert_eq!(
        gvk_list(&defs["io.k8s.api.apps.v1.Deployment"]),
        vec![gvk("apps", "v1", "Deployment")]
    );
    let delete_options = gvk_list(&defs["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]);
    assert!(delete_options.contains(&gvk("", "v1", "DeleteOptions")));
    assert!(delete_options.contains(&gvk("apps", "v1", "DeleteOptions")));
    // Every catalogue kind (and list) is there, and every ref resolves.
    for r in RESOURCES {
        let k = crate::schema::builtin_definitions()
            .kind(r.group, r.version, r.kind)
            .unwrap();
        assert!(
            gvk_list(&defs[&k.definition]).contains(&gvk(r.group, r.version, r.kind)),
            "{}",
            r.kind
        );
    }
    let mut refs = Vec::new();
    all_refs(&doc, &mut refs);
    for r in refs {
        let name = r.strip_prefix("#/definitions/").expect("v2 refs");
        assert!(defs.contains_key(name), "{r}");
    }
    // v2 keeps descriptions beside refs; the Pod's spec points at PodSpec.
    let spec = &defs["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
    assert_eq!(spec["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");
    assert!(spec["description"].is_string());
    // Paths, with a body parameter on writes.
    let pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"];
    assert_eq!(pods["post"]["x-kubernetes-action"], "post");
    assert_eq!(pods["get"]["x-kubernetes-action"], "list");
    let body = pods["post"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["in"] == "body")
        .unwrap();
    assert_eq!(
        body["schema"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.Pod"
    );
    assert_eq!(
        doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"]
            ["x-kubernetes-group-version-kind"]["kind"],
        "Scale"
    );
    // Cached: the same bytes every time, and they parse back.
    assert_eq!(v2_bytes(), v2_bytes());
    let parsed: Value = serde_json::from_slice(&v2_bytes()).unwrap();
    assert_eq!(parsed, doc);
}

#[test]
fn v3_index_lists_every_group_version_and_each_document_parses() {
    let index = v3_index();
    let paths = index["paths"].as_object().unwrap();
    for key in [
        "api",
        "api/v1",
        "apis",
        "apis/apps",
        "apis/apps/v1",
        "version",
    ] {
        assert!(paths.contains_key(key), "{key}");
    }
    for r in RESOURCES {
        assert!(
            paths.contains_key(&gv_path(r.group, r.version)),
            "{}",
            r.kind
        );
    }
    for (key, entry) in paths {
        let url = entry["serverRelativeURL"].as_str().unwrap();
        let hash = v3_hash(key).unwrap();
        assert_eq!(url, format!("/openapi/v3/{key}?hash={hash}"));
        let bytes = v3_bytes(key).unwrap();
        assert_eq!(content_hash(&bytes), hash);
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc, v3(key).unwrap());
        assert_eq!(doc["openapi"], "3.0.0");
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut refs = Vec::new();
        all_refs(&doc, &mut refs);
        for r in refs {
            let name = r.strip_prefix("#/components/schemas/").expect("v3 refs");
            assert!(schemas.contains_key(name), "{key}: {r}");
        }
    }
    let parsed: Value = serde_json::from_slice(&v3_index_bytes()).unwrap();
    assert_eq!(&parsed, index);
    assert!(v3("/api/v1/").is_some(), "slashes are trimmed");
    assert!(v3("apis/nope/v1").is_none());
}

#[test]
fn v3_documents_have_what_kubectl_looks_for() {
    for r in RESOURCES {
        let key = gv_path(r.group, r.version);
        let doc = v3(&key).unwrap();
        let want = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let ops = doc["paths"].as_object().unwrap();

        // kubectl explain: the GVK on an operation of one of the resource's paths ...
        let prefix = format!("/{key}");
        let candidates = [
            format!("{prefix}/{}", r.plural),
            format!("{prefix}/{}/{{name}}", r.plural),
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
        ];
        let found = candidates.iter().any(|p| {
            ops.get(p).is_some_and(|item| {
                ["get", "post", "put", "patch", "delete"]
                    .iter()
                    .any(|m| item[*m]["x-kubernetes-group-version-kind"] == want)
            })
        });
        assert!(found, "{key} {}", r.plural);
        // ... and a component schema carrying it, whose fields have types explain can name.
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let (_, schema) = schemas
            .iter()
            .find(|(_, s)| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|a| a.contains(&want))
            })
            .unwrap_or_else(|| panic!("no component for {want}"));
        assert!(schema["description"].is_string());
        let metadata = &schema["properties"]["metadata"];
        let metadata_ref = metadata["allOf"][0]["$ref"].as_str();
        assert!(metadata_ref
            .or(metadata["$ref"].as_str())
            .unwrap()
            .ends_with("ObjectMeta"));

        // kubectl's fieldValidation probe: a PATCH operation with the GVK that takes the
        // parameter itself (not through the path).
        if r.has_verb("patch") {
            let patch = ops
                .values()
                .filter_map(|item| item.get("patch"))
                .find(|op| op["x-kubernetes-group-version-kind"] == want)
                .unwrap_or_else(|| panic!("no PATCH for {want}"));
            let params = patch["parameters"].as_array().unwrap();
            assert!(params
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
            let content = patch["requestBody"]["content"].as_object().unwrap();
            assert!(content.contains_key("application/merge-patch+json"));
            assert!(content.contains_key("application/apply-patch+yaml"));
            // Without patch strategies in the schemas, client-side apply must use kubectl's
            // compiled-in types: strategic merge is not advertised.
            assert!(!content.contains_key("application/strategic-merge-patch+json"));
        }
    }
}

/// `kubectl explain`'s type column, as its template derives it.
fn type_guess(doc: &Value, s: &Value) -> String {
    if let Some(items) = s.get("items") {
        return format!("[]{}", type_guess(doc, items));
    }
    if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
        return format!("map[string]{}", type_guess(doc, ap));
    }
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        if all.len() == 1 && s.get("properties").is_none() {
            return type_guess(doc, &all[0]);
        }
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap();
        let target = &doc["components"]["schemas"][name];
        return match target["type"].as_str() {
            None | Some("object") => name.rsplit('.').next().unwrap().to_string(),
            Some(t) => t.to_string(),
        };
    }
    match s["type"].as_str() {
        Some("object") | None => "Object".into(),
        Some(t) => t.into(),
    }
}

/// The field a dotted path names, from a kind's schema, the way explain walks it.
fn field<'a>(doc: &'a Value, mut s: &'a Value, path: &str) -> &'a Value {
    let resolve = |s: &'a Value| -> &'a Value {
        let r = s
            .get("$ref")
            .or_else(|| s["allOf"].get(0).and_then(|a| a.get("$ref")))
            .and_then(Value::as_str);
        match r {
            Some(r) => &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
            None => s,
        }
    };
    for seg in path.split('.') {
        let mut at = resolve(s);
        while at.get("properties").is_none() {
            at = resolve(at.get("items").or(at.get("additionalProperties")).unwrap());
        }
        s = &at["properties"][seg];
        assert!(!s.is_null(), "{path}: no {seg}");
    }
    s
}

#[test]
fn explain_sees_the_types_kubernetes_shows() {
    let core = v3("api/v1").unwrap();
    let pod = &core["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    let cases = [
        ("apiVersion", "string"),
        ("metadata", "ObjectMeta"),
        ("spec", "PodSpec"),
        ("spec.containers", "[]Container"),
        ("spec.containers.ports.containerPort", "integer"),
        ("spec.containers.resources.limits", "map[string]Quantity"),
        ("spec.containers.livenessProbe.httpGet.port", "IntOrString"),
        ("spec.nodeSelector", "map[string]string"),
        ("metadata.creationTimestamp", "string"),
        ("metadata.labels", "map[string]string"),
    ];
    for (path, want) in cases {
        assert_eq!(type_guess(&core, field(&core, pod, path)), want, "{path}");
    }
    // Required markers follow Kubernetes, not k8s-openapi's Rust types.
    assert!(pod.get("required").is_none());
    let spec = &core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
    assert_eq!(spec["required"], json!(["containers"]));
    let apps = v3("apis/apps/v1").unwrap();
    let sts = &apps["components"]["schemas"]["io.k8s.api.apps.v1.StatefulSetSpec"];
    assert!(sts["required"]
        .as_array()
        .unwrap()
        .contains(&json!("serviceName")));
    let event = &core["components"]["schemas"]["io.k8s.api.core.v1.Event"];
    assert!(event["required"]
        .as_array()
        .unwrap()
        .contains(&json!("metadata")));
    let ios = &core["components"]["schemas"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
    assert_eq!(ios["format"], "int-or-string");
    assert!(ios.get("type").is_none());
}

#[test]
fn content_hash_is_stable() {
    assert_eq!(content_hash(b""), "6C62272E07BB014262B821756295C58D");
    assert_ne!(content_hash(b"a"), content_hash(b"b"));
    assert_eq!(content_hash(b"abc").len(), 32);
}

#[test]
fn patch_metadata_lands_on_properties_when_supplied() {
    fn meta(def: &str, field: &str) -> Option<(&'static str, Option<&'static str>)> {
        match (def, field) {
            ("io.k8s.api.core.v1.PodSpec", "containers") => Some(("merge", Some("name"))),
            ("io.k8s.api.core.v1.PodSpec", "volumes") => Some(("merge,retainKeys", Some("name"))),
            _ => None,
        }
    }
    let defs = crate::schema::builtin_definitions();
    let spec = &defs.definitions["io.k8s.api.core.v1.PodSpec"];
    let out = convert(spec, Flavor::V3, Some(("io.k8s.api.core.v1.PodSpec", meta)));
    let containers = &out["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(
        out["properties"]["volumes"]["x-kubernetes-patch-strategy"],
        "merge,retainKeys"
    );
    assert!(out["properties"]["affinity"]
        .get("x-kubernetes-patch-strategy")
        .is_none());
    // Refs with siblings become allOf in v3 and stay as they are in v2.
    assert_eq!(
        out["properties"]["affinity"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.Affinity"
    );
    let v2 = convert(spec, Flavor::V2, None);
    assert_eq!(
        v2["properties"]["affinity"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.Affinity"
    );
}
