//! Pod spec defaulting (`SetDefaults_PodSpec`, `SetDefaults_Container`, volumes, probes ...),
//! shared by Pods and every pod template.

use serde_json::{json, Map, Value};

use super::{ensure_obj, normalize_resource_list, set_default};

/// Default a pod template (`spec.template` of workloads): metadata and spec.
pub fn template(t: &mut Value) {
    let Some(m) = t.as_object_mut() else {
        return;
    };
    let md = ensure_obj(m, "metadata");
    md.entry("creationTimestamp").or_insert(Value::Null);
    let spec = ensure_obj(m, "spec");
    pod_spec(spec);
}

/// `SetDefaults_PodSpec` and everything the generated defaulters call under a PodSpec.
pub fn pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            volume(v);
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                container(c);
            }
        }
    }
    if let Some(oh) = spec.get_mut("overhead").and_then(Value::as_object_mut) {
        normalize_resource_list(oh);
    }
    if let Some(r) = spec.get_mut("resources").and_then(Value::as_object_mut) {
        for f in ["limits", "requests"] {
            if let Some(l) = r.get_mut(f).and_then(Value::as_object_mut) {
                normalize_resource_list(l);
            }
        }
    }
}

/// The Pod-only defaults (`SetDefaults_Pod`): requests from limits, service links, host ports.
pub fn pod_only(spec: &mut Map<String, Value>) {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                let Some(r) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                    continue;
                };
                let Some(limits) = r.get("limits").and_then(Value::as_object).cloned() else {
                    continue;
                };
                let req = ensure_obj(r, "requests");
                for (k, v) in limits {
                    req.entry(k).or_insert(v);
                }
            }
        }
    }
    set_default(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["containers", "initContainers"] {
            if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs.iter_mut() {
                    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                            let hp = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
                            if hp == 0 {
                                if let Some(cp) = p.get("containerPort").cloned() {
                                    p.insert("hostPort".into(), cp);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The tag of an image reference as Kubernetes' `ParseImageName` sees it: `latest` when
/// neither tag nor digest is given, "" when only a digest is or the reference is malformed.
pub fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let repo_path = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            rest
        }
        _ => name,
    };
    let repo_path = repo_path.split(':').next().unwrap_or(repo_path);
    if name.is_empty() || repo_path.bytes().any(|c| c.is_ascii_uppercase()) || image.trim() != image
    {
        return "";
    }
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest.is_some() => "",
        None => "latest",
    }
}

/// `SetDefaults_Container` plus ports, env, resources and probes.
pub fn container(c: &mut Map<String, Value>) {
    if !c.contains_key("imagePullPolicy") || c["imagePullPolicy"].as_str() == Some("") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
        for e in env.iter_mut() {
            if let Some(fr) = e
                .pointer_mut("/valueFrom/fieldRef")
                .and_then(Value::as_object_mut)
            {
                set_default(fr, "apiVersion", json!("v1"));
            }
        }
    }
    let r = ensure_obj(c, "resources");
    for f in ["limits", "requests"] {
        if let Some(l) = r.get_mut(f).and_then(Value::as_object_mut) {
            normalize_resource_list(l);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            http_get(p);
        }
    }
    if let Some(l) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = l.get_mut(hook).and_then(Value::as_object_mut) {
                http_get(h);
            }
        }
    }
}

fn http_get(handler: &mut Map<String, Value>) {
    if let Some(h) = handler.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_default(h, "path", json!("/"));
        set_default(h, "scheme", json!("HTTP"));
    }
}

const SOURCES: &[&str] = crate::validation::VOLUME_SOURCES;

/// `SetDefaults_Volume` and the defaults of each volume source.
pub fn volume(v: &mut Map<String, Value>) {
    if !SOURCES
        .iter()
        .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    for (src, field) in [
        ("secret", "defaultMode"),
        ("configMap", "defaultMode"),
        ("downwardAPI", "defaultMode"),
        ("projected", "defaultMode"),
    ] {
        if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
            set_default(s, field, json!(420));
        }
    }
    if let Some(items) = v
        .get_mut("downwardAPI")
        .and_then(|d| d.get_mut("items"))
        .and_then(Value::as_array_mut)
    {
        downward_items(items);
    }
    if let Some(sources) = v
        .get_mut("projected")
        .and_then(|p| p.get_mut("sources"))
        .and_then(Value::as_array_mut)
    {
        for s in sources.iter_mut() {
            if let Some(t) = s
                .get_mut("serviceAccountToken")
                .and_then(Value::as_object_mut)
            {
                set_default(t, "expirationSeconds", json!(3600));
            }
            if let Some(items) = s
                .get_mut("downwardAPI")
                .and_then(|d| d.get_mut("items"))
                .and_then(Value::as_array_mut)
            {
                downward_items(items);
            }
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_default(h, "type", json!(""));
    }
    super::core::persistent_source_defaults(v);
    if let Some(spec) = v
        .get_mut("ephemeral")
        .and_then(|e| e.get_mut("volumeClaimTemplate"))
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        super::core::pvc_spec(spec);
    }
}

fn downward_items(items: &mut [Value]) {
    for i in items.iter_mut() {
        if let Some(fr) = i.get_mut("fieldRef").and_then(Value::as_object_mut) {
            set_default(fr, "apiVersion", json!("v1"));
        }
    }
}
