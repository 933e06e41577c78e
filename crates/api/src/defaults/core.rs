//! core/v1 defaults.

use serde_json::{json, Map, Value};

use super::{ensure_obj, normalize_resource_list, pod, set_default, zero_status};
use crate::meta::At as _;

pub fn apply(kind: &str, m: &mut Map<String, Value>) {
    match kind {
        "Pod" => {
            let spec = ensure_obj(m, "spec");
            pod::pod_spec(spec);
            pod::pod_only(spec);
            zero_status(m, json!({}));
            if let Some(status) = m.get_mut("status").and_then(Value::as_object_mut) {
                for (one, many) in [("podIP", "podIPs"), ("hostIP", "hostIPs")] {
                    first_of_plural(status, one, many, |ip| json!({"ip": ip}));
                }
            }
        }
        "PodTemplate" => {
            if let Some(t) = m.get_mut("template") {
                pod::template(t);
            }
        }
        "ReplicationController" => replication_controller(m),
        "Service" => service(m),
        "Secret" => {
            set_default(m, "type", json!("Opaque"));
            secret_string_data(m);
        }
        "Namespace" => {
            if let Some(name) = m
                .get("metadata")
                .and_then(|md| md.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(String::from)
            {
                let labels = ensure_obj(ensure_obj(m, "metadata"), "labels");
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            let spec = ensure_obj(m, "spec");
            // Go leaves out an empty list (`omitempty`), e.g. after finalize emptied it.
            if spec
                .get("finalizers")
                .is_some_and(|f| f.as_array().is_some_and(Vec::is_empty) || f.is_null())
            {
                spec.remove("finalizers");
            }
            let status = ensure_obj(m, "status");
            set_default(status, "phase", json!("Active"));
        }
        "Node" => {
            if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
                first_of_plural(spec, "podCIDR", "podCIDRs", |c| c.clone());
            }
            let status = ensure_obj(m, "status");
            for f in ["capacity", "allocatable"] {
                if let Some(l) = status.get_mut(f).and_then(Value::as_object_mut) {
                    normalize_resource_list(l);
                }
            }
            if status.get("allocatable").is_none_or(Value::is_null) {
                if let Some(c) = status.get("capacity").filter(|c| !c.is_null()).cloned() {
                    status.insert("allocatable".into(), c);
                }
            }
        }
        "PersistentVolume" => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set_default(spec, "volumeMode", json!("Filesystem"));
            if let Some(c) = spec.get_mut("capacity").and_then(Value::as_object_mut) {
                normalize_resource_list(c);
            }
            if let Some(h) = spec.get_mut("hostPath").and_then(Value::as_object_mut) {
                set_default(h, "type", json!(""));
            }
            persistent_source_defaults(spec);
            let status = ensure_obj(m, "status");
            set_default(status, "phase", json!("Pending"));
        }
        "PersistentVolumeClaim" => {
            pvc_spec(ensure_obj(m, "spec"));
            let status = ensure_obj(m, "status");
            set_default(status, "phase", json!("Pending"));
        }
        "Endpoints" => {
            if let Some(subsets) = m.get_mut("subsets").and_then(Value::as_array_mut) {
                for ss in subsets.iter_mut() {
                    if let Some(ports) = ss.get_mut("ports").and_then(Value::as_array_mut) {
                        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                            set_default(p, "protocol", json!("TCP"));
                        }
                    }
                }
            }
        }
        "LimitRange" => {
            if let Some(limits) = m
                .get_mut("spec")
                .and_then(|s| s.get_mut("limits"))
                .and_then(Value::as_array_mut)
            {
                for l in limits.iter_mut().filter_map(Value::as_object_mut) {
                    limit_range_item(l);
                }
            }
        }
        "ResourceQuota" => {
            for (parent, f) in [("spec", "hard"), ("status", "hard"), ("status", "used")] {
                if let Some(l) = m
                    .get_mut(parent)
                    .and_then(|p| p.get_mut(f))
                    .and_then(Value::as_object_mut)
                {
                    normalize_resource_list(l);
                }
            }
            zero_status(m, json!({}));
        }
        _ => {}
    }
}

/// The conversions of a singular field kept for compatibility and its plural (a node's
/// `podCIDR`/`podCIDRs`, a pod's `podIP`/`podIPs`): only the plural exists inside Kubernetes,
/// filled from the singular when empty, and the singular always reads back as its first item.
fn first_of_plural(
    m: &mut Map<String, Value>,
    one: &str,
    many: &str,
    item: impl Fn(&Value) -> Value,
) {
    let first = m
        .get(many)
        .and_then(Value::as_array)
        .and_then(|l| l.first())
        .cloned();
    match first {
        Some(first) => {
            let value = first.get("ip").cloned().unwrap_or(first);
            if value.as_str().is_some_and(|v| !v.is_empty()) {
                m.insert(one.into(), value);
            }
        }
        None => {
            if let Some(v) = m
                .get(one)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                let list = json!([item(v)]);
                m.insert(many.into(), list);
            }
        }
    }
}

/// Secret's v1 conversion: `stringData` is write-only, merged into `data` (base64, winning
/// over the same key there) and never stored or returned.
fn secret_string_data(m: &mut Map<String, Value>) {
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    if string_data.is_empty() {
        return;
    }
    let data = ensure_obj(m, "data");
    for (k, v) in string_data {
        if let Some(s) = v.as_str() {
            data.insert(k, json!(base64_encode(s.as_bytes())));
        }
    }
}

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// `SetDefaults_PersistentVolumeClaimSpec` plus its resource lists.
pub fn pvc_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "volumeMode", json!("Filesystem"));
    ensure_obj(spec, "resources");
    if let Some(r) = spec.get_mut("resources").and_then(Value::as_object_mut) {
        for f in ["limits", "requests"] {
            if let Some(l) = r.get_mut(f).and_then(Value::as_object_mut) {
                normalize_resource_list(l);
            }
        }
    }
}

/// The declarative defaults of the legacy in-tree volume sources (RBD, iSCSI, Azure disk,
/// ScaleIO), on a pod volume or a PersistentVolume spec.
pub fn persistent_source_defaults(v: &mut Map<String, Value>) {
    if let Some(r) = v.get_mut("rbd").and_then(Value::as_object_mut) {
        set_default(r, "pool", json!("rbd"));
        set_default(r, "user", json!("admin"));
        set_default(r, "keyring", json!("/etc/ceph/keyring"));
    }
    if let Some(i) = v.get_mut("iscsi").and_then(Value::as_object_mut) {
        set_default(i, "iscsiInterface", json!("default"));
    }
    if let Some(a) = v.get_mut("azureDisk").and_then(Value::as_object_mut) {
        set_default(a, "cachingMode", json!("ReadWrite"));
        set_default(a, "fsType", json!("ext4"));
        set_default(a, "readOnly", json!(false));
        set_default(a, "kind", json!("Shared"));
    }
    if let Some(s) = v.get_mut("scaleIO").and_then(Value::as_object_mut) {
        set_default(s, "storageMode", json!("ThinProvisioned"));
        set_default(s, "fsType", json!("xfs"));
    }
}

fn limit_range_item(l: &mut Map<String, Value>) {
    for f in [
        "max",
        "min",
        "default",
        "defaultRequest",
        "maxLimitRequestRatio",
    ] {
        if let Some(r) = l.get_mut(f).and_then(Value::as_object_mut) {
            normalize_resource_list(r);
        }
    }
    if l.get("type").and_then(Value::as_str) != Some("Container") {
        return;
    }
    let max = l
        .get("max")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let min = l
        .get("min")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let default = ensure_obj(l, "default");
    for (k, v) in max {
        default.entry(k).or_insert(v);
    }
    let default = default.clone();
    let req = ensure_obj(l, "defaultRequest");
    for (k, v) in default {
        req.entry(k).or_insert(v);
    }
    for (k, v) in min {
        req.entry(k).or_insert(v);
    }
}

fn replication_controller(m: &mut Map<String, Value>) {
    let labels = m
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|md| md.get("labels"))
        .filter(|l| !l.is_null())
        .cloned();
    if let Some(labels) = labels {
        let spec = ensure_obj(m, "spec");
        if spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        {
            spec.insert("selector".into(), labels.clone());
        }
        let md = ensure_obj(m, "metadata");
        if md
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
        {
            md.insert("labels".into(), labels);
        }
    }
    let spec = ensure_obj(m, "spec");
    set_default(spec, "replicas", json!(1));
    if let Some(t) = spec.get_mut("template") {
        pod::template(t);
    }
    zero_status(m, json!({"replicas": 0}));
}

fn service(m: &mut Map<String, Value>) {
    let spec = ensure_obj(m, "spec");
    set_default(spec, "sessionAffinity", json!("None"));
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.at("/clientIP/timeoutSeconds"));
            if timeout.is_none_or(Value::is_null) {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_default(spec, "type", json!("ClusterIP"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(v) => v.as_i64() == Some(0),
            };
            if unset {
                if let Some(port) = p.get("port").cloned() {
                    p.insert("targetPort".into(), port);
                }
            }
        }
    }
    let t = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let has_external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let externally_accessible =
        t == "LoadBalancer" || t == "NodePort" || (t == "ClusterIP" && has_external_ips);
    if externally_accessible
        && spec
            .get("externalTrafficPolicy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    if ["NodePort", "LoadBalancer", "ClusterIP"].contains(&t.as_str()) {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if t == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if t != "ExternalName" {
        let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
        let no_selector = spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        let policy = if headless && no_selector {
            "RequireDualStack"
        } else {
            "SingleStack"
        };
        set_default(spec, "ipFamilyPolicy", json!(policy));
    }
    let status = ensure_obj(m, "status");
    let lb = ensure_obj(status, "loadBalancer");
    if t == "LoadBalancer" {
        if let Some(ing) = lb.get_mut("ingress").and_then(Value::as_array_mut) {
            for i in ing.iter_mut().filter_map(Value::as_object_mut) {
                if i.get("ip")
                    .and_then(Value::as_str)
                    .is_some_and(|ip| !ip.is_empty())
                {
                    set_default(i, "ipMode", json!("VIP"));
                }
            }
        }
    }
}

/// Carry a Service's allocated values over an update that left them out.
pub fn service_carry_over(new: &mut Value, old: &Value) {
    let (Some(ns), Some(os)) = (
        new.get_mut("spec").and_then(Value::as_object_mut),
        old.get("spec"),
    ) else {
        return;
    };
    let needs_ip = |t: Option<&str>| t != Some("ExternalName");
    let old_type = os.get("type").and_then(Value::as_str);
    let new_type = ns.get("type").and_then(Value::as_str).map(str::to_string);
    let new_type = new_type.as_deref();
    if needs_ip(old_type) && needs_ip(new_type) {
        let empty = |v: Option<&Value>| match v {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        };
        if empty(ns.get("clusterIP")) {
            for f in ["clusterIP", "clusterIPs"] {
                if let Some(v) = os.get(f) {
                    ns.insert(f.into(), v.clone());
                }
            }
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            if empty(ns.get(f)) {
                if let Some(v) = os.get(f) {
                    ns.insert(f.into(), v.clone());
                }
            }
        }
    }
    let old_ports = os
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if new_type == Some("NodePort") || new_type == Some("LoadBalancer") {
        if let Some(ports) = ns.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    continue;
                }
                let same = old_ports.iter().find(|o| {
                    o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol")
                });
                if let Some(np) = same
                    .and_then(|o| o.get("nodePort"))
                    .filter(|v| v.as_i64().unwrap_or(0) != 0)
                {
                    p.insert("nodePort".into(), np.clone());
                }
            }
        }
    }
    if ns
        .get("healthCheckNodePort")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0
    {
        if let Some(v) = os
            .get("healthCheckNodePort")
            .filter(|v| v.as_i64().unwrap_or(0) != 0)
        {
            if new_type == Some("LoadBalancer")
                && ns.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
            {
                ns.insert("healthCheckNodePort".into(), v.clone());
            }
        }
    }
}
