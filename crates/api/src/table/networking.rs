//! networking.k8s.io and discovery.k8s.io: ingresses, ingress classes, network policies,
//! service CIDRs, IP addresses and endpoint slices.

use serde_json::{json, Value};

use super::core::load_balancer_ingress;
use super::duration::{self, Nanos};
use super::format::{at, format_label_selector, list, list_with_more, name, opt_int, text};
use super::{doc, Column, Description, Printer, AGE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

pub(crate) static INGRESS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Class",
            "string",
            Description::Text(
                "The name of the IngressClass resource that should be used for additional \
                 configuration",
            ),
        ),
        Column::new(
            "Hosts",
            "string",
            Description::Text(
                "Hosts that incoming requests are matched against before the ingress rule",
            ),
        ),
        Column::new(
            "Address",
            "string",
            Description::Text("Address is a list containing ingress points for the load-balancer"),
        ),
        Column::new(
            "Ports",
            "string",
            Description::Text("Ports of TLS configurations that open"),
        ),
        AGE,
    ],
    row: ingress_row,
};

/// The first three hosts of the rules (rules without a host are skipped but still counted in
/// "+ N more..."), or `*` when no rule names a host.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        let host = text(rule, &["host"]);
        if !more && !host.is_empty() {
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return "*".into();
    }
    let joined = hosts.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

fn ingress_row(ing: &Value, now: Nanos) -> Vec<Value> {
    let class = at(ing, &["spec", "ingressClassName"])
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let ports = if list(ing, &["spec", "tls"]).is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        json!(name(ing)),
        json!(class),
        json!(format_hosts(list(ing, &["spec", "rules"]))),
        json!(load_balancer_ingress(at(ing, &["status", "loadBalancer"]))),
        json!(ports),
        age(ing, now),
    ]
}

pub(crate) static INGRESS_CLASS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Controller",
            "string",
            Description::Text("Controller that is responsible for handling this class"),
        ),
        Column::new(
            "Parameters",
            "string",
            Description::Text("A reference to a resource with additional parameters"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let parameters = match at(obj, &["spec", "parameters"]) {
            None => "<none>".to_string(),
            Some(p) => {
                let kind = match at(p, &["apiGroup"]).and_then(Value::as_str) {
                    Some(g) => format!("{}.{g}", text(p, &["kind"])),
                    None => text(p, &["kind"]).to_string(),
                };
                format!("{kind}/{}", text(p, &["name"]))
            }
        };
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "controller"])),
            json!(parameters),
            age(obj, now),
        ]
    },
};

pub(crate) static NETWORK_POLICY: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Pod-Selector",
            "string",
            doc("io.k8s.api.networking.v1.NetworkPolicySpec", "podSelector"),
        ),
        AGE,
    ],
    row: |obj, now| {
        // podSelector is a value, not a pointer: missing means the empty selector.
        let empty = json!({});
        let selector = at(obj, &["spec", "podSelector"]).unwrap_or(&empty);
        vec![
            json!(name(obj)),
            json!(format_label_selector(Some(selector))),
            age(obj, now),
        ]
    },
};

pub(crate) static SERVICE_CIDR: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "CIDRs",
            "string",
            doc("io.k8s.api.networking.v1beta1.ServiceCIDRSpec", "cidrs"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let cidrs: Vec<&str> = list(obj, &["spec", "cidrs"])
            .iter()
            .map(|c| c.as_str().unwrap_or(""))
            .collect();
        vec![json!(name(obj)), json!(cidrs.join(",")), age(obj, now)]
    },
};

/// Kubernetes v1.32 declares two columns for IP addresses but sends three cells (the third
/// is the age); this keeps that.
pub(crate) static IP_ADDRESS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "ParentRef",
            "string",
            doc("io.k8s.api.networking.v1beta1.IPAddressSpec", "parentRef"),
        ),
    ],
    row: |obj, now| {
        let parent = match at(obj, &["spec", "parentRef"]) {
            None => "<none>".to_string(),
            Some(p) => {
                let (group, resource) = (text(p, &["group"]), text(p, &["resource"]));
                let mut s = if group.is_empty() {
                    resource.to_lowercase()
                } else {
                    format!("{resource}.{group}").to_lowercase()
                };
                let ns = text(p, &["namespace"]);
                if !ns.is_empty() {
                    s = format!("{s}/{ns}");
                }
                format!("{s}/{}", text(p, &["name"]))
            }
        };
        vec![json!(name(obj)), json!(parent), age(obj, now)]
    },
};

const ENDPOINT_SLICE_DEF: &str = "io.k8s.api.discovery.v1.EndpointSlice";

pub(crate) static ENDPOINT_SLICE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "AddressType",
            "string",
            doc(ENDPOINT_SLICE_DEF, "addressType"),
        ),
        Column::new("Ports", "string", doc(ENDPOINT_SLICE_DEF, "ports")),
        Column::new("Endpoints", "string", doc(ENDPOINT_SLICE_DEF, "endpoints")),
        AGE,
    ],
    row: |obj, now| {
        let ports: Vec<String> = list(obj, &["ports"])
            .iter()
            .map(|p| match (opt_int(p, &["port"]), at(p, &["name"])) {
                (Some(n), _) => n.to_string(),
                (None, Some(n)) => n.as_str().unwrap_or("").to_string(),
                (None, None) => "*".to_string(),
            })
            .collect();
        let addresses: Vec<String> = list(obj, &["endpoints"])
            .iter()
            .flat_map(|e| list(e, &["addresses"]))
            .map(|a| a.as_str().unwrap_or("").to_string())
            .collect();
        vec![
            json!(name(obj)),
            json!(text(obj, &["addressType"])),
            json!(list_with_more(&ports, 3)),
            json!(list_with_more(&addresses, 3)),
            age(obj, now),
        ]
    },
};
