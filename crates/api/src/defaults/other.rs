//! Defaults of the smaller groups: autoscaling, networking, rbac, scheduling, storage,
//! discovery, policy, certificates.

use serde_json::{json, Map, Value};

use super::{ensure_obj, set_default, zero_status};

pub fn apply(group: &str, kind: &str, api_version: &str, m: &mut Map<String, Value>) {
    match (group, kind) {
        ("autoscaling", "HorizontalPodAutoscaler") => {
            let v1 = api_version == "autoscaling/v1";
            let spec = ensure_obj(m, "spec");
            set_default(spec, "minReplicas", json!(1));
            if v1 {
                zero_status(m, json!({"currentReplicas": 0, "desiredReplicas": 0}));
                return;
            }
            if spec
                .get("metrics")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec.insert(
                    "metrics".into(),
                    json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
                );
            }
            if let Some(b) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
                scaling_rules(
                    b,
                    "scaleUp",
                    Some(0),
                    json!([{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]),
                );
                scaling_rules(
                    b,
                    "scaleDown",
                    None,
                    json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
                );
            }
            zero_status(m, json!({"currentMetrics": null, "desiredReplicas": 0}));
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            let spec = ensure_obj(m, "spec");
            ensure_obj(spec, "podSelector");
            for dir in ["ingress", "egress"] {
                if let Some(rules) = spec.get_mut(dir).and_then(Value::as_array_mut) {
                    for r in rules.iter_mut() {
                        if let Some(ports) = r.get_mut("ports").and_then(Value::as_array_mut) {
                            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                                set_default(p, "protocol", json!("TCP"));
                            }
                        }
                    }
                }
            }
            if spec
                .get("policyTypes")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                let mut types = vec![json!("Ingress")];
                if spec
                    .get("egress")
                    .and_then(Value::as_array)
                    .is_some_and(|e| !e.is_empty())
                {
                    types.push(json!("Egress"));
                }
                spec.insert("policyTypes".into(), Value::Array(types));
            }
        }
        ("networking.k8s.io", "IngressClass") => {
            if let Some(p) = m
                .get_mut("spec")
                .and_then(|s| s.get_mut("parameters"))
                .and_then(Value::as_object_mut)
            {
                set_default(p, "scope", json!("Cluster"));
            }
        }
        ("networking.k8s.io", "Ingress") => {
            zero_status(m, json!({"loadBalancer": {}}));
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            let rr = ensure_obj(m, "roleRef");
            if rr
                .get("apiGroup")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                rr.insert("apiGroup".into(), json!("rbac.authorization.k8s.io"));
            }
            if let Some(subjects) = m.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
                    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
                    let empty = s
                        .get("apiGroup")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty();
                    if empty && (kind == "User" || kind == "Group") {
                        s.insert("apiGroup".into(), json!("rbac.authorization.k8s.io"));
                    }
                }
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            set_default(m, "preemptionPolicy", json!("PreemptLowerPriority"))
        }
        ("storage.k8s.io", "StorageClass") => {
            set_default(m, "reclaimPolicy", json!("Delete"));
            set_default(m, "volumeBindingMode", json!("Immediate"));
        }
        ("storage.k8s.io", "CSIDriver") => {
            let spec = ensure_obj(m, "spec");
            set_default(spec, "attachRequired", json!(true));
            set_default(spec, "podInfoOnMount", json!(false));
            set_default(spec, "storageCapacity", json!(false));
            set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
            set_default(spec, "requiresRepublish", json!(false));
            set_default(spec, "volumeLifecycleModes", json!(["Persistent"]));
            set_default(spec, "seLinuxMount", json!(false));
        }
        ("storage.k8s.io", "VolumeAttachment") => zero_status(m, json!({"attached": false})),
        ("discovery.k8s.io", "EndpointSlice") => {
            if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    set_default(p, "name", json!(""));
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
        ("policy", "PodDisruptionBudget") => zero_status(
            m,
            json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}),
        ),
        ("certificates.k8s.io", "CertificateSigningRequest") => zero_status(m, json!({})),
        _ => {}
    }
}

/// `GenerateHPAScale{Up,Down}Rules`: fill what a given behavior leaves out.
fn scaling_rules(b: &mut Map<String, Value>, dir: &str, window: Option<i64>, policies: Value) {
    let rules = ensure_obj(b, dir);
    if let Some(w) = window {
        set_default(rules, "stabilizationWindowSeconds", json!(w));
    }
    set_default(rules, "selectPolicy", json!("Max"));
    if rules
        .get("policies")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        rules.insert("policies".into(), policies);
    }
}
