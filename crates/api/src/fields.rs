//! Field selectors per kind, as Kubernetes v1.32 serves them.
//!
//! Two steps decide a field selector, as in kube-apiserver. First the kind's field label
//! conversion says which labels a client may use (and may rename some, e.g. a pod's legacy
//! `spec.host`, or events.k8s.io's `regarding.kind`); any other label is refused with a 400
//! BadRequest whose message is [`unsupported_error`]. Then the object's selectable fields give
//! the value each label is compared with: always a string ("true"/"false" for booleans,
//! decimal for numbers, "" for anything missing).
//!
//! Every kind accepts `metadata.name` and `metadata.namespace` unless it registers its own list
//! (nodes, namespaces and certificate signing requests do not accept `metadata.namespace`).
//! A cluster-scoped object's namespace is "", so `metadata.namespace=x` matches none of them.

use serde_json::Value;

/// How a kind's field label conversion refuses a label.
#[derive(Clone, Copy)]
enum Refusal {
    /// `field label not supported: <label>` (most kinds with their own list).
    Listed,
    /// `field label "<label>" not supported for Job`.
    JobStyle,
    /// The default conversion of kinds without a list of their own.
    Default,
}

struct Kind {
    /// The labels clients may use.
    labels: &'static [&'static str],
    /// Labels that stand for a selectable field of another name; a label found only here is a
    /// legacy alias, accepted but not listed.
    renames: &'static [(&'static str, &'static str)],
    refusal: Refusal,
}

const META: &str = "metadata.name";
const META_NS: &str = "metadata.namespace";

static DEFAULT: Kind = Kind {
    labels: &[META, META_NS],
    renames: &[],
    refusal: Refusal::Default,
};

static POD: Kind = Kind {
    labels: &[
        META,
        META_NS,
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ],
    // Old v1 clients send spec.host.
    renames: &[("spec.host", "spec.nodeName")],
    refusal: Refusal::Listed,
};

static NODE: Kind = Kind {
    labels: &[META, "spec.unschedulable"],
    renames: &[],
    refusal: Refusal::Listed,
};

static REPLICATION_CONTROLLER: Kind = Kind {
    labels: &[META, META_NS, "status.replicas"],
    renames: &[],
    refusal: Refusal::Listed,
};

static EVENT: Kind = Kind {
    labels: &[
        META,
        META_NS,
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ],
    renames: &[],
    refusal: Refusal::Listed,
};

/// events.k8s.io/v1 names the same selectable fields after its own field names.
static EVENTS_V1_EVENT: Kind = Kind {
    labels: &[
        META,
        META_NS,
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ],
    renames: &[
        ("regarding.kind", "involvedObject.kind"),
        ("regarding.namespace", "involvedObject.namespace"),
        ("regarding.name", "involvedObject.name"),
        ("regarding.uid", "involvedObject.uid"),
        ("regarding.apiVersion", "involvedObject.apiVersion"),
        (
            "regarding.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        ("regarding.fieldPath", "involvedObject.fieldPath"),
        ("reportingController", "reportingComponent"),
    ],
    refusal: Refusal::Listed,
};

static NAMESPACE: Kind = Kind {
    labels: &[META, "status.phase"],
    renames: &[],
    refusal: Refusal::Listed,
};

static SECRET: Kind = Kind {
    labels: &[META, META_NS, "type"],
    renames: &[],
    refusal: Refusal::Listed,
};

static SERVICE: Kind = Kind {
    labels: &[META, META_NS, "spec.clusterIP", "spec.type"],
    renames: &[],
    refusal: Refusal::Listed,
};

static JOB: Kind = Kind {
    labels: &[META, META_NS, "status.successful"],
    renames: &[],
    refusal: Refusal::JobStyle,
};

static CSR: Kind = Kind {
    labels: &[META, "spec.signerName"],
    renames: &[],
    refusal: Refusal::Listed,
};

fn kind(group: &str, kind: &str) -> &'static Kind {
    match (group, kind) {
        ("", "Pod") => &POD,
        ("", "Node") => &NODE,
        ("", "ReplicationController") => &REPLICATION_CONTROLLER,
        ("", "Event") => &EVENT,
        ("events.k8s.io", "Event") => &EVENTS_V1_EVENT,
        ("", "Namespace") => &NAMESPACE,
        ("", "Secret") => &SECRET,
        ("", "Service") => &SERVICE,
        ("batch", "Job") => &JOB,
        ("certificates.k8s.io", "CertificateSigningRequest") => &CSR,
        _ => &DEFAULT,
    }
}

/// The field selector labels a kind accepts (legacy aliases such as a pod's `spec.host` are
/// accepted too but not listed).
pub fn supported(group: &str, kind_name: &str) -> &'static [&'static str] {
    kind(group, kind_name).labels
}

/// The message of the 400 BadRequest kube-apiserver answers a list or watch whose field
/// selector uses a label the kind does not support.
pub fn unsupported_error(group: &str, kind_name: &str, field: &str) -> String {
    match kind(group, kind_name).refusal {
        Refusal::Listed => format!("field label not supported: {field}"),
        Refusal::JobStyle => {
            format!("field label {} not supported for Job", quote(field))
        }
        Refusal::Default => format!(
            "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            quote(field)
        ),
    }
}

/// Go's `%q` for the strings field labels are made of.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Check a field selector label: `Ok` with the selectable field it compares (the label itself
/// unless it is an alias), or `Err` with the message of kube-apiserver's 400 BadRequest.
pub fn check(group: &str, kind_name: &str, field: &str) -> Result<&'static str, String> {
    let k = kind(group, kind_name);
    if let Some((_, internal)) = k.renames.iter().find(|(label, _)| *label == field) {
        return Ok(internal);
    }
    k.labels
        .iter()
        .find(|label| **label == field)
        .copied()
        .ok_or_else(|| unsupported_error(group, kind_name, field))
}

/// Every field selector label of the kind (in [`supported`] order) with its value for `obj`:
/// what a cache indexes an object by. `namespaced` is the kind's scope.
pub fn values(
    group: &str,
    kind_name: &str,
    namespaced: bool,
    obj: &Value,
) -> Vec<(&'static str, String)> {
    let k = kind(group, kind_name);
    k.labels
        .iter()
        .map(|label| {
            let internal = k
                .renames
                .iter()
                .find(|(l, _)| l == label)
                .map_or(*label, |(_, internal)| *internal);
            let value = if internal == META_NS && !namespaced {
                String::new()
            } else {
                selectable(obj, internal)
            };
            (*label, value)
        })
        .collect()
}

/// The value of field selector label `field` for `obj`, as Kubernetes compares it; `None` when
/// the kind does not support the label (see [`check`] for the error).
pub fn get(group: &str, kind_name: &str, obj: &Value, field: &str) -> Option<String> {
    let internal = check(group, kind_name, field).ok()?;
    let cluster_scoped = crate::catalogue::RESOURCES
        .iter()
        .any(|r| r.group == group && r.kind == kind_name && !r.namespaced);
    if internal == "metadata.namespace" && cluster_scoped {
        // Cluster-scoped kinds have no namespace among their selectable fields.
        return Some(String::new());
    }
    Some(selectable(obj, internal))
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |v, key| v.get(key))
        .filter(|v| !v.is_null())
}

/// A field as a string: strings as they are, numbers in decimal, booleans as "true"/"false".
fn string_at(v: &Value, path: &[&str]) -> String {
    match at(v, path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// A field of a core/v1 event, or of the same event in its events.k8s.io/v1 form.
fn event_at(obj: &Value, core: &[&str], events: &[&str]) -> String {
    if at(obj, &core[..1]).is_some() {
        string_at(obj, core)
    } else {
        string_at(obj, events)
    }
}

/// The selectable field `internal` of `obj` (names as in the kind's field set).
fn selectable(obj: &Value, internal: &str) -> String {
    match internal {
        "spec.hostNetwork" | "spec.unschedulable" => {
            let path: Vec<&str> = internal.split('.').collect();
            at(obj, &path)
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string()
        }
        "status.replicas" => at(obj, &["status", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .to_string(),
        "status.successful" => at(obj, &["status", "succeeded"])
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .to_string(),
        // The primary pod IP; status.podIPs is accepted but not a selectable field.
        "status.podIP" => match at(obj, &["status", "podIPs"]).and_then(Value::as_array) {
            Some(ips) if !ips.is_empty() => string_at(&ips[0], &["ip"]),
            _ => string_at(obj, &["status", "podIP"]),
        },
        "status.podIPs" => String::new(),
        "spec.clusterIP" => match string_at(obj, &["spec", "clusterIP"]) {
            ip if ip.is_empty() => at(obj, &["spec", "clusterIPs"])
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            ip => ip,
        },
        "source" => {
            let component = event_at(
                obj,
                &["source", "component"],
                &["deprecatedSource", "component"],
            );
            if component.is_empty() {
                event_at(obj, &["reportingComponent"], &["reportingController"])
            } else {
                component
            }
        }
        "reportingComponent" => event_at(obj, &["reportingComponent"], &["reportingController"]),
        _ if internal.starts_with("involvedObject.") => {
            let leaf = &internal["involvedObject.".len()..];
            event_at(obj, &["involvedObject", leaf], &["regarding", leaf])
        }
        _ => {
            let path: Vec<&str> = internal.split('.').collect();
            string_at(obj, &path)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": {"nodeName": "node-a", "restartPolicy": "Always",
                     "schedulerName": "default-scheduler", "serviceAccountName": "web",
                     "containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Running", "podIP": "10.1.0.7",
                       "podIPs": [{"ip": "10.1.0.7"}, {"ip": "fd00::7"}]}
        })
    }

    #[test]
    fn pod_fields() {
        let p = pod();
        let g = |f: &str| get("", "Pod", &p, f);
        assert_eq!(g("metadata.name").as_deref(), Some("web-0"));
        assert_eq!(g("metadata.namespace").as_deref(), Some("shop"));
        assert_eq!(g("spec.nodeName").as_deref(), Some("node-a"));
        assert_eq!(g("spec.host").as_deref(), Some("node-a"));
        assert_eq!(g("spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(g("status.phase").as_deref(), Some("Running"));
        assert_eq!(g("status.podIP").as_deref(), Some("10.1.0.7"));
        assert_eq!(g("status.podIPs").as_deref(), Some(""));
        assert_eq!(g("status.nominatedNodeName").as_deref(), Some(""));
        assert_eq!(g("spec.containers"), None);
        assert_eq!(
            check("", "Pod", "spec.containers").unwrap_err(),
            "field label not supported: spec.containers"
        );
        assert!(supported("", "Pod").contains(&"status.podIPs"));
        let mut host = pod();
        host["spec"]["hostNetwork"] = json!(true);
        assert_eq!(
            get("", "Pod", &host, "spec.hostNetwork").as_deref(),
            Some("true")
        );
    }

    #[test]
    fn kinds_with_their_own_lists() {
        let node = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        assert_eq!(
            get("", "Node", &node, "spec.unschedulable").as_deref(),
            Some("true")
        );
        assert_eq!(
            get(
                "",
                "Node",
                &json!({"metadata": {"name": "n2"}}),
                "spec.unschedulable"
            )
            .as_deref(),
            Some("false")
        );
        assert_eq!(
            check("", "Node", "metadata.namespace").unwrap_err(),
            "field label not supported: metadata.namespace"
        );
        let ns = json!({"metadata": {"name": "dev"}, "status": {"phase": "Terminating"}});
        assert_eq!(
            get("", "Namespace", &ns, "status.phase").as_deref(),
            Some("Terminating")
        );
        let secret = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"});
        assert_eq!(
            get("", "Secret", &secret, "type").as_deref(),
            Some("kubernetes.io/tls")
        );
        let rc = json!({"metadata": {"name": "r"}, "status": {"replicas": 3}});
        assert_eq!(
            get("", "ReplicationController", &rc, "status.replicas").as_deref(),
            Some("3")
        );
        let job = json!({"metadata": {"name": "j"}, "status": {"succeeded": 2}});
        assert_eq!(
            get("batch", "Job", &job, "status.successful").as_deref(),
            Some("2")
        );
        assert_eq!(
            check("batch", "Job", "status.failed").unwrap_err(),
            "field label \"status.failed\" not supported for Job"
        );
        let csr = json!({"metadata": {"name": "c"}, "spec": {"signerName": "kubernetes.io/kubelet-serving"}});
        assert_eq!(
            get(
                "certificates.k8s.io",
                "CertificateSigningRequest",
                &csr,
                "spec.signerName"
            )
            .as_deref(),
            Some("kubernetes.io/kubelet-serving")
        );
        let svc = json!({"metadata": {"name": "db", "namespace": "x"},
                         "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}});
        assert_eq!(
            get("", "Service", &svc, "spec.clusterIP").as_deref(),
            Some("None")
        );
        assert_eq!(
            get("", "Service", &svc, "spec.type").as_deref(),
            Some("ClusterIP")
        );
    }

    #[test]
    fn values_agree_with_get_for_every_kind() {
        let obj = json!({
            "metadata": {"name": "o", "namespace": "shop"},
            "spec": {"nodeName": "node-a", "hostNetwork": true, "unschedulable": true,
                     "clusterIP": "10.0.0.1", "type": "NodePort", "signerName": "s"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.7"}], "replicas": 2,
                       "succeeded": 1},
            "involvedObject": {"kind": "Pod", "name": "web"},
            "regarding": {"kind": "Pod", "name": "web"},
            "reason": "BackOff", "type": "Warning", "reportingController": "kubelet"
        });
        for r in crate::catalogue::RESOURCES {
            let all = values(r.group, r.kind, r.namespaced, &obj);
            let labels: Vec<&str> = all.iter().map(|(l, _)| *l).collect();
            assert_eq!(labels, supported(r.group, r.kind), "{}", r.kind);
            for (label, value) in all {
                assert_eq!(
                    Some(value),
                    get(r.group, r.kind, &obj, label),
                    "{} {label}",
                    r.kind
                );
            }
        }
    }

    #[test]
    fn default_kinds_accept_only_metadata() {
        let rs = json!({"metadata": {"name": "rs", "namespace": "a"}, "status": {"replicas": 0}});
        assert_eq!(
            get("apps", "ReplicaSet", &rs, "metadata.name").as_deref(),
            Some("rs")
        );
        assert_eq!(get("apps", "ReplicaSet", &rs, "status.replicas"), None);
        assert_eq!(
            unsupported_error("apps", "ReplicaSet", "status.replicas"),
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        // Cluster-scoped kinds take metadata.namespace and compare it with "".
        let pv = json!({"metadata": {"name": "pv1"}});
        assert_eq!(
            get("", "PersistentVolume", &pv, "metadata.namespace").as_deref(),
            Some("")
        );
        assert_eq!(
            supported("", "PersistentVolumeClaim"),
            &["metadata.name", "metadata.namespace"]
        );
    }

    #[test]
    fn events_in_both_versions() {
        let core = json!({
            "metadata": {"name": "web.17a", "namespace": "shop"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "shop", "uid": "u-1",
                               "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
            "reason": "BackOff", "type": "Warning",
            "source": {"component": "kubelet", "host": "node-a"},
            "reportingComponent": "kubelet"
        });
        let g = |f: &str| get("", "Event", &core, f);
        assert_eq!(g("involvedObject.kind").as_deref(), Some("Pod"));
        assert_eq!(g("involvedObject.uid").as_deref(), Some("u-1"));
        assert_eq!(
            g("involvedObject.fieldPath").as_deref(),
            Some("spec.containers{c}")
        );
        assert_eq!(g("source").as_deref(), Some("kubelet"));
        assert_eq!(g("reportingComponent").as_deref(), Some("kubelet"));
        assert_eq!(g("involvedObject.resourceVersion").as_deref(), Some(""));

        let v1 = json!({
            "metadata": {"name": "web.17b", "namespace": "shop"},
            "regarding": {"kind": "Pod", "name": "web"},
            "reason": "Scheduled", "type": "Normal",
            "reportingController": "default-scheduler"
        });
        let g = |f: &str| get("events.k8s.io", "Event", &v1, f);
        assert_eq!(g("regarding.kind").as_deref(), Some("Pod"));
        assert_eq!(g("regarding.name").as_deref(), Some("web"));
        assert_eq!(
            g("reportingController").as_deref(),
            Some("default-scheduler")
        );
        assert_eq!(g("source"), None);
        assert_eq!(g("involvedObject.kind"), None);
        // A core/v1 selector over an event stored in the events.k8s.io form still works.
        assert_eq!(
            get("", "Event", &v1, "source").as_deref(),
            Some("default-scheduler")
        );
        assert_eq!(
            get("", "Event", &v1, "involvedObject.name").as_deref(),
            Some("web")
        );
    }
}
