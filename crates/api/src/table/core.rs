//! Core kinds: replication controllers, nodes, namespaces, services, endpoints, events and
//! component statuses.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{
    at, containers, flag, format_labels, int, join_host_port, list, meta_map, name, opt_int, text,
};
use super::{doc, Column, Description, Printer, AGE, CONTAINERS_WIDE, IMAGES_WIDE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

const RC_SPEC: &str = "io.k8s.api.core.v1.ReplicationControllerSpec";
const RC_STATUS: &str = "io.k8s.api.core.v1.ReplicationControllerStatus";

pub(crate) static REPLICATION_CONTROLLER: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Desired", "integer", doc(RC_SPEC, "replicas")),
        Column::new("Current", "integer", doc(RC_STATUS, "replicas")),
        Column::new("Ready", "integer", doc(RC_STATUS, "readyReplicas")),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new("Selector", "string", doc(RC_SPEC, "selector")).wide(),
    ],
    row: |obj, now| {
        let (names, images) = containers(list(obj, &["spec", "template", "spec", "containers"]));
        vec![
            json!(name(obj)),
            json!(opt_int(obj, &["spec", "replicas"]).unwrap_or(1)),
            json!(int(obj, &["status", "replicas"])),
            json!(int(obj, &["status", "readyReplicas"])),
            age(obj, now),
            json!(names),
            json!(images),
            json!(format_labels(at(obj, &["spec", "selector"]))),
        ]
    },
};

const NODE_INFO: &str = "io.k8s.api.core.v1.NodeSystemInfo";
const NODE_STATUS: &str = "io.k8s.api.core.v1.NodeStatus";

pub(crate) static NODE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            Description::Text("The status of the node"),
        ),
        Column::new(
            "Roles",
            "string",
            Description::Text("The roles of the node"),
        ),
        AGE,
        Column::new("Version", "string", doc(NODE_INFO, "kubeletVersion")),
        Column::new("Internal-IP", "string", doc(NODE_STATUS, "addresses")).wide(),
        Column::new("External-IP", "string", doc(NODE_STATUS, "addresses")).wide(),
        Column::new("OS-Image", "string", doc(NODE_INFO, "osImage")).wide(),
        Column::new("Kernel-Version", "string", doc(NODE_INFO, "kernelVersion")).wide(),
        Column::new(
            "Container-Runtime",
            "string",
            doc(NODE_INFO, "containerRuntimeVersion"),
        )
        .wide(),
    ],
    row: node_row,
};

/// The node's roles: `node-role.kubernetes.io/<role>` label keys and the `kubernetes.io/role`
/// label's value, sorted and de-duplicated.
fn node_roles(node: &Value) -> Vec<String> {
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = at(node, &["metadata", "labels"]).and_then(Value::as_object) {
        for (k, v) in labels {
            let v = v.as_str().unwrap_or("");
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if k == "kubernetes.io/role" && !v.is_empty() {
                roles.push(v.to_string());
            }
        }
    }
    roles.sort();
    roles.dedup();
    roles
}

fn node_address(node: &Value, type_: &str) -> String {
    list(node, &["status", "addresses"])
        .iter()
        .find(|a| text(a, &["type"]) == type_)
        .map_or("<none>".to_string(), |a| text(a, &["address"]).to_string())
}

fn node_row(node: &Value, now: Nanos) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    // The last condition of a type wins, as Kubernetes collects them into a map.
    if let Some(ready) = list(node, &["status", "conditions"])
        .iter()
        .rfind(|c| text(c, &["type"]) == "Ready")
    {
        status.push(if text(ready, &["status"]) == "True" {
            "Ready".into()
        } else {
            "NotReady".into()
        });
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if flag(node, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled".into());
    }
    let roles = node_roles(node).join(",");
    let info = |key: &str| match text(node, &["status", "nodeInfo", key]) {
        "" => "<unknown>".to_string(),
        v => v.to_string(),
    };
    vec![
        json!(name(node)),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".into()
        } else {
            roles
        }),
        age(node, now),
        json!(text(node, &["status", "nodeInfo", "kubeletVersion"])),
        json!(node_address(node, "InternalIP")),
        json!(node_address(node, "ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

pub(crate) static NAMESPACE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            Description::Text("The status of the namespace"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(text(obj, &["status", "phase"])),
            age(obj, now),
        ]
    },
};

const SERVICE_SPEC: &str = "io.k8s.api.core.v1.ServiceSpec";

pub(crate) static SERVICE: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Type", "string", doc(SERVICE_SPEC, "type")),
        Column::new("Cluster-IP", "string", doc(SERVICE_SPEC, "clusterIP")),
        Column::new("External-IP", "string", doc(SERVICE_SPEC, "externalIPs")),
        Column::new("Port(s)", "string", doc(SERVICE_SPEC, "ports")),
        AGE,
        Column::new("Selector", "string", doc(SERVICE_SPEC, "selector")).wide(),
    ],
    row: service_row,
};

fn strings(v: &Value, path: &[&str]) -> Vec<String> {
    list(v, path)
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The load balancer's ingress points: IPs, else hostnames, sorted and de-duplicated.
/// (The server prints wide, so the list is never shortened.)
pub(crate) fn load_balancer_ingress(status: Option<&Value>) -> String {
    let mut points: Vec<String> = status
        .map(|s| list(s, &["ingress"]))
        .unwrap_or(&[])
        .iter()
        .filter_map(|i| match (text(i, &["ip"]), text(i, &["hostname"])) {
            ("", "") => None,
            ("", host) => Some(host.to_string()),
            (ip, _) => Some(ip.to_string()),
        })
        .collect();
    points.sort();
    points.dedup();
    points.join(",")
}

fn service_external_ip(svc: &Value, type_: &str) -> String {
    let external = strings(svc, &["spec", "externalIPs"]);
    match type_ {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(at(svc, &["status", "loadBalancer"]));
            if !external.is_empty() {
                let mut all: Vec<String> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').map(str::to_string).collect()
                };
                all.extend(external);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".into()
            }
        }
        "ExternalName" => text(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".into(),
    }
}

fn service_row(svc: &Value, now: Nanos) -> Vec<Value> {
    // Stored services always have a type and protocols; these are their defaults.
    let type_ = match text(svc, &["spec", "type"]) {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = list(svc, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| text(svc, &["spec", "clusterIP"]));
    let ports: Vec<String> = list(svc, &["spec", "ports"])
        .iter()
        .map(|p| {
            let protocol = match text(p, &["protocol"]) {
                "" => "TCP",
                pr => pr,
            };
            match int(p, &["nodePort"]) {
                n if n > 0 => format!("{}:{n}/{protocol}", int(p, &["port"])),
                _ => format!("{}/{protocol}", int(p, &["port"])),
            }
        })
        .collect();
    let ports = ports.join(",");
    vec![
        json!(name(svc)),
        json!(type_),
        json!(if cluster_ip.is_empty() {
            "<none>"
        } else {
            cluster_ip
        }),
        json!(service_external_ip(svc, type_)),
        json!(if ports.is_empty() {
            "<none>".into()
        } else {
            ports
        }),
        age(svc, now),
        json!(format_labels(at(svc, &["spec", "selector"]))),
    ]
}

pub(crate) static ENDPOINTS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Endpoints",
            "string",
            doc("io.k8s.api.core.v1.Endpoints", "subsets"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(format_endpoints(obj)),
            age(obj, now),
        ]
    },
};

/// Up to three ready "IP:port" pairs (or bare IPs for port-less subsets) and how many more.
fn format_endpoints(ep: &Value) -> String {
    let subsets = list(ep, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut shown: Vec<String> = Vec::new();
    let mut count = 0usize;
    for ss in subsets {
        let addresses = list(ss, &["addresses"]);
        let ports = list(ss, &["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            for a in addresses {
                if shown.len() == MAX {
                    break;
                }
                shown.push(text(a, &["ip"]).to_string());
            }
            continue;
        }
        for p in ports {
            count += addresses.len();
            for a in addresses {
                if shown.len() == MAX {
                    break;
                }
                shown.push(join_host_port(text(a, &["ip"]), int(p, &["port"])));
            }
        }
    }
    let joined = shown.join(",");
    if count > MAX {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

const EVENT_DEF: &str = "io.k8s.api.core.v1.Event";

pub(crate) static EVENT: Printer = Printer {
    columns: &[
        Column::new("Last Seen", "string", doc(EVENT_DEF, "lastTimestamp")),
        Column::new("Type", "string", doc(EVENT_DEF, "type")),
        Column::new("Reason", "string", doc(EVENT_DEF, "reason")),
        Column::new("Object", "string", doc(EVENT_DEF, "involvedObject")),
        Column::new(
            "Subobject",
            "string",
            doc("io.k8s.api.core.v1.ObjectReference", "fieldPath"),
        )
        .wide(),
        Column::new("Source", "string", doc(EVENT_DEF, "source")).wide(),
        Column::new("Message", "string", doc(EVENT_DEF, "message")),
        Column::new("First Seen", "string", doc(EVENT_DEF, "firstTimestamp")).wide(),
        Column::new("Count", "string", doc(EVENT_DEF, "count")).wide(),
        NAME.wide(),
    ],
    row: event_row,
};

/// A field of a core/v1 event, or of the same event as events.k8s.io/v1 names it.
fn ev<'a>(obj: &'a Value, core: &str, events: &str) -> Option<&'a Value> {
    at(obj, &[core]).or_else(|| at(obj, &[events]))
}

fn event_row(obj: &Value, now: Nanos) -> Vec<Value> {
    let first = match duration::timestamp(ev(obj, "firstTimestamp", "deprecatedFirstTimestamp")) {
        Some(t) => duration::human_duration(now - t),
        None => duration::since(at(obj, &["eventTime"]), now),
    };
    let mut last = match duration::timestamp(ev(obj, "lastTimestamp", "deprecatedLastTimestamp")) {
        Some(t) => duration::human_duration(now - t),
        None => first.clone(),
    };
    let mut count = ev(obj, "count", "deprecatedCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(series) = at(obj, &["series"]) {
        last = duration::since(at(series, &["lastObservedTime"]), now);
        count = int(series, &["count"]);
    } else if count == 0 {
        count = 1;
    }
    let null = Value::Null;
    let involved = ev(obj, "involvedObject", "regarding").unwrap_or(&null);
    let kind = text(involved, &["kind"]).to_lowercase();
    let target = match text(involved, &["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let source = ev(obj, "source", "deprecatedSource").unwrap_or(&null);
    let first_non_empty = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = first_non_empty(
        text(source, &["component"]),
        ev(obj, "reportingComponent", "reportingController")
            .and_then(Value::as_str)
            .unwrap_or(""),
    );
    let instance = first_non_empty(text(source, &["host"]), text(obj, &["reportingInstance"]));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    let message = ev(obj, "message", "note")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    vec![
        json!(last),
        json!(text(obj, &["type"])),
        json!(text(obj, &["reason"])),
        json!(target),
        json!(text(involved, &["fieldPath"])),
        json!(source),
        json!(message),
        json!(first),
        json!(count),
        json!(name(obj)),
    ]
}

pub(crate) static COMPONENT_STATUS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            Description::Text("Status of the component conditions"),
        ),
        Column::new(
            "Message",
            "string",
            Description::Text("Message of the component conditions"),
        ),
        Column::new(
            "Error",
            "string",
            Description::Text("Error of the component conditions"),
        ),
    ],
    row: |obj, _now| {
        let healthy = list(obj, &["conditions"])
            .iter()
            .find(|c| text(c, &["type"]) == "Healthy");
        let (status, message, error) = match healthy {
            Some(c) => (
                if text(c, &["status"]) == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                text(c, &["message"]),
                text(c, &["error"]),
            ),
            None => ("Unknown", "", ""),
        };
        vec![
            json!(name(obj)),
            json!(status),
            json!(message),
            json!(error),
        ]
    },
};

/// Whether the object carries `annotation: "true"`.
pub(crate) fn annotation_true(obj: &Value, annotation: &str) -> bool {
    meta_map(obj, "annotations", annotation) == Some("true")
}
