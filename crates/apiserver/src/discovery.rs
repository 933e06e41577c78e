//! Discovery: /api, /apis, /apis/<group>, /api/v1, /apis/<group>/<version>, in both the legacy
//! form and the aggregated form (apidiscovery.k8s.io/v2) that kubectl 1.32 asks for first.

use capstan_api::catalogue::{self, ResourceInfo};
use serde_json::{json, Value};

/// The aggregated-discovery media type kubectl asks for.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// Which aggregated discovery version the Accept header asks for, if any.
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=APIGroupDiscoveryList") && p.contains("g=apidiscovery.k8s.io") {
            if p.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if p.contains("v=v2") {
                return Some("v2");
            }
        }
    }
    None
}

/// The kind, group and version a subresource answers with, and its verbs.
fn subresource_kind(
    info: &ResourceInfo,
    sub: &str,
) -> (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
) {
    const GPU: &[&str] = &["get", "patch", "update"];
    match sub {
        "status" => ("", "", "", GPU),
        "scale" => ("autoscaling", "v1", "Scale", GPU),
        "binding" => ("", "v1", "Binding", &["create"]),
        "eviction" => ("policy", "v1", "Eviction", &["create"]),
        "log" => ("", "v1", "Pod", &["get"]),
        "exec" => ("", "v1", "PodExecOptions", &["create", "get"]),
        "attach" => ("", "v1", "PodAttachOptions", &["create", "get"]),
        "portforward" => ("", "v1", "PodPortForwardOptions", &["create", "get"]),
        "proxy" if info.kind == "Node" => (
            "",
            "v1",
            "NodeProxyOptions",
            &["create", "delete", "get", "patch", "update"],
        ),
        "proxy" if info.kind == "Service" => (
            "",
            "v1",
            "ServiceProxyOptions",
            &["create", "delete", "get", "patch", "update"],
        ),
        "proxy" => (
            "",
            "v1",
            "PodProxyOptions",
            &["create", "delete", "get", "patch", "update"],
        ),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest", &["create"]),
        "finalize" => ("", "", "", &["update"]),
        "approval" => ("", "", "", GPU),
        _ => ("", "", "", GPU),
    }
}

fn storage_version_hash(info: &ResourceInfo) -> String {
    // A stable short hash of group/version/kind (clients only compare it for equality).
    let mut h: u64 = 0xcbf29ce484222325;
    for b in format!("{}/{}/{}", info.group, info.version, info.kind).bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    crate::registry::base64_encode(&h.to_be_bytes())
}

/// /api
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs[0],
    })
}

/// The groups in discovery order with their versions (preferred first): the built-in ones,
/// then those of custom resources (`custom`, already in their discovery order).
fn groups(custom: &[&'static ResourceInfo]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out = catalogue::groups();
    for r in custom {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// The resources of one group/version, built-in or custom.
fn resources_of<'a>(
    custom: &'a [&'static ResourceInfo],
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    catalogue::resources_of(group, version).chain(
        custom
            .iter()
            .copied()
            .filter(move |r| r.group == group && r.version == version),
    )
}

/// /apis
pub fn api_group_list(custom: &[&'static ResourceInfo]) -> Value {
    let groups: Vec<Value> = groups(custom)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// /apis/<group>
pub fn api_group(custom: &[&'static ResourceInfo], group: &str) -> Option<Value> {
    let groups = groups(custom);
    let (name, versions) = groups.iter().find(|(g, _)| *g == group)?;
    let mut v = group_json(name, versions);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// /api/v1 or /apis/<group>/<version>
pub fn api_resource_list(
    custom: &[&'static ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let mut resources = Vec::new();
    for r in resources_of(custom, group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
            "storageVersionHash": storage_version_hash(r),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for sub in r.subresources {
            let (g, v, k, verbs) = subresource_kind(r, sub);
            let mut e = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": if k.is_empty() { r.kind } else { k },
                "verbs": verbs,
            });
            if !v.is_empty() && (g != r.group || v != r.version) {
                e["group"] = json!(g);
                e["version"] = json!(v);
            }
            resources.push(e);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let subs: Vec<Value> = r
        .subresources
        .iter()
        .map(|sub| {
            let (g, v, k, verbs) = subresource_kind(r, sub);
            let (g, v, k) = if k.is_empty() {
                (r.group, r.version, r.kind)
            } else {
                (g, v, k)
            };
            json!({
                "subresource": sub,
                "responseKind": {"group": g, "version": v, "kind": k},
                "verbs": verbs,
            })
        })
        .collect();
    let mut e = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    if !subs.is_empty() {
        e["subresources"] = Value::Array(subs);
    }
    e
}

fn aggregated_group(custom: &[&'static ResourceInfo], name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = resources_of(custom, name, v)
                .map(aggregated_resource)
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if name.is_empty() {
        json!({"creationTimestamp": null})
    } else {
        json!({"name": name, "creationTimestamp": null})
    };
    json!({"metadata": metadata, "versions": vs})
}

/// Aggregated discovery for /api (`core == true`) or /apis.
pub fn aggregated(custom: &[&'static ResourceInfo], core: bool, version: &str) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(custom, "", &["v1"])]
    } else {
        groups(custom)
            .iter()
            .map(|(g, vs)| aggregated_group(custom, g, vs))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_pods_and_subresources() {
        let list = api_resource_list(&[], "", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"deployments/scale") || !names.contains(&"deployments"));
        assert!(api_resource_list(&[], "nope", "v1").is_none());
    }

    #[test]
    fn certificate_requests_list_their_approval() {
        let list = api_resource_list(&[], "certificates.k8s.io", "v1").unwrap();
        let approval = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "certificatesigningrequests/approval")
            .expect("the approval subresource");
        assert_eq!(
            approval["verbs"],
            serde_json::json!(["get", "patch", "update"])
        );
        let agg = aggregated(&[], false, "v2");
        let csr = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["metadata"]["name"] == "certificates.k8s.io")
            .flat_map(|g| g["versions"][0]["resources"].as_array().unwrap())
            .find(|r| r["resource"] == "certificatesigningrequests")
            .expect("certificatesigningrequests");
        assert!(csr["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "approval"));
    }

    #[test]
    fn aggregated_discovery_is_asked_for_by_accept_header() {
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(accept), Some("v2"));
        assert_eq!(wants_aggregated("application/json"), None);
        let agg = aggregated(&[], false, "v2");
        assert!(agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["metadata"]["name"] == "apps"));
    }
}
