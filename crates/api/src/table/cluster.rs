//! Cluster policy and administration kinds: RBAC bindings, certificate signing requests, leases,
//! priority classes, disruption budgets, runtime classes, admission configuration and API
//! priority and fairness.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{at, count, int, int_or_string, list, name, opt_int, text};
use super::{doc, Column, Description, Printer, AGE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

const fn txt(s: &'static str) -> Description {
    Description::Text(s)
}

pub(crate) static ROLE_BINDING: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Role",
            "string",
            doc("io.k8s.api.rbac.v1.RoleBinding", "roleRef"),
        ),
        AGE,
        Column::new("Users", "string", txt("Users in the roleBinding")).wide(),
        Column::new("Groups", "string", txt("Groups in the roleBinding")).wide(),
        Column::new(
            "ServiceAccounts",
            "string",
            txt("ServiceAccounts in the roleBinding"),
        )
        .wide(),
    ],
    row: binding_row,
};

pub(crate) static CLUSTER_ROLE_BINDING: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Role",
            "string",
            doc("io.k8s.api.rbac.v1.ClusterRoleBinding", "roleRef"),
        ),
        AGE,
        Column::new("Users", "string", txt("Users in the clusterRoleBinding")).wide(),
        Column::new("Groups", "string", txt("Groups in the clusterRoleBinding")).wide(),
        Column::new(
            "ServiceAccounts",
            "string",
            txt("ServiceAccounts in the clusterRoleBinding"),
        )
        .wide(),
    ],
    row: binding_row,
};

fn binding_row(obj: &Value, now: Nanos) -> Vec<Value> {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in list(obj, &["subjects"]) {
        let subject_name = text(s, &["name"]).to_string();
        match text(s, &["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{subject_name}", text(s, &["namespace"]))),
            "User" => users.push(subject_name),
            "Group" => groups.push(subject_name),
            _ => {}
        }
    }
    vec![
        json!(name(obj)),
        json!(format!(
            "{}/{}",
            text(obj, &["roleRef", "kind"]),
            text(obj, &["roleRef", "name"])
        )),
        age(obj, now),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

const CSR_SPEC: &str = "io.k8s.api.certificates.v1.CertificateSigningRequestSpec";

pub(crate) static CSR: Printer = Printer {
    columns: &[
        NAME,
        AGE,
        Column::new("SignerName", "string", doc(CSR_SPEC, "signerName")),
        Column::new("Requestor", "string", doc(CSR_SPEC, "request")),
        Column::new(
            "RequestedDuration",
            "string",
            doc(CSR_SPEC, "expirationSeconds"),
        ),
        Column::new(
            "Condition",
            "string",
            doc(
                "io.k8s.api.certificates.v1.CertificateSigningRequestStatus",
                "conditions",
            ),
        ),
    ],
    row: csr_row,
};

/// Denied, Approved or Pending, then ",Failed" and ",Issued" when they apply.
fn csr_status(csr: &Value) -> String {
    let has = |t: &str| {
        list(csr, &["status", "conditions"])
            .iter()
            .any(|c| text(c, &["type"]) == t)
    };
    let mut status = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !text(csr, &["status", "certificate"]).is_empty() {
        status.push_str(",Issued");
    }
    status
}

fn csr_row(csr: &Value, now: Nanos) -> Vec<Value> {
    let signer = match text(csr, &["spec", "signerName"]) {
        "" => "<none>",
        s => s,
    };
    let requested = opt_int(csr, &["spec", "expirationSeconds"]).map_or_else(
        || "<none>".to_string(),
        |s| duration::human_duration(s as i128 * 1_000_000_000),
    );
    vec![
        json!(name(csr)),
        age(csr, now),
        json!(signer),
        json!(text(csr, &["spec", "username"])),
        json!(requested),
        json!(csr_status(csr)),
    ]
}

pub(crate) static LEASE: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Holder",
            "string",
            doc("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "holderIdentity"])),
            age(obj, now),
        ]
    },
};

const PRIORITY_CLASS_DEF: &str = "io.k8s.api.scheduling.v1.PriorityClass";

pub(crate) static PRIORITY_CLASS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Value", "integer", doc(PRIORITY_CLASS_DEF, "value")),
        Column::new(
            "Global-Default",
            "boolean",
            doc(PRIORITY_CLASS_DEF, "globalDefault"),
        ),
        AGE,
        Column::new(
            "PreemptionPolicy",
            "string",
            doc(PRIORITY_CLASS_DEF, "preemptionPolicy"),
        ),
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(int(obj, &["value"])),
            json!(at(obj, &["globalDefault"])
                .and_then(Value::as_bool)
                .unwrap_or(false)),
            age(obj, now),
            json!(text(obj, &["preemptionPolicy"])),
        ]
    },
};

pub(crate) static PDB: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Min Available",
            "string",
            txt("The minimum number of pods that must be available."),
        ),
        Column::new(
            "Max Unavailable",
            "string",
            txt("The maximum number of pods that may be unavailable."),
        ),
        Column::new(
            "Allowed Disruptions",
            "integer",
            txt("Calculated number of pods that may be disrupted at this time."),
        ),
        AGE,
    ],
    row: |obj, now| {
        let or_na = |f: &str| at(obj, &["spec", f]).map_or("N/A".to_string(), int_or_string);
        vec![
            json!(name(obj)),
            json!(or_na("minAvailable")),
            json!(or_na("maxUnavailable")),
            json!(int(obj, &["status", "disruptionsAllowed"])),
            age(obj, now),
        ]
    },
};

pub(crate) static RUNTIME_CLASS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Handler", "string", Description::Empty),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(text(obj, &["handler"])),
            age(obj, now),
        ]
    },
};

pub(crate) static WEBHOOK: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Webhooks",
            "integer",
            txt("Webhooks indicates the number of webhooks registered in this configuration"),
        ),
        AGE,
    ],
    row: |obj, now| {
        vec![
            json!(name(obj)),
            json!(count(obj, &["webhooks"])),
            age(obj, now),
        ]
    },
};

pub(crate) static VAP: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Validations",
            "integer",
            txt("Validations indicates the number of validation rules defined in this configuration"),
        ),
        Column::new(
            "ParamKind",
            "string",
            txt("ParamKind specifies the kind of resources used to parameterize this policy"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let param_kind = at(obj, &["spec", "paramKind"]).map_or("<unset>".to_string(), |p| {
            format!("{}/{}", text(p, &["apiVersion"]), text(p, &["kind"]))
        });
        vec![
            json!(name(obj)),
            json!(count(obj, &["spec", "validations"])),
            json!(param_kind),
            age(obj, now),
        ]
    },
};

pub(crate) static VAP_BINDING: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "PolicyName",
            "string",
            txt("PolicyName indicates the policy definition which the policy binding binded to"),
        ),
        Column::new(
            "ParamRef",
            "string",
            txt("ParamRef indicates the param resource which sets the configration param"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let param = match at(obj, &["spec", "paramRef"]) {
            None => "<unset>".to_string(),
            Some(p) => match (text(p, &["name"]), text(p, &["namespace"])) {
                ("", _) => at(p, &["selector"]).map_or("<unset>".to_string(), go_label_selector),
                (n, "") => format!("*/{n}"),
                (n, ns) => format!("{ns}/{n}"),
            },
        };
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "policyName"])),
            json!(param),
            age(obj, now),
        ]
    },
};

/// A label selector in the Go struct notation Kubernetes prints for binding parameters.
fn go_label_selector(sel: &Value) -> String {
    let mut labels: Vec<(&String, &str)> = at(sel, &["matchLabels"])
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    labels.sort();
    let labels: String = labels.iter().map(|(k, v)| format!("{k}: {v},")).collect();
    let exprs: String = list(sel, &["matchExpressions"])
        .iter()
        .map(|e| {
            let values: Vec<&str> = list(e, &["values"])
                .iter()
                .map(|v| v.as_str().unwrap_or(""))
                .collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                text(e, &["key"]),
                text(e, &["operator"]),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},\
         MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

const FLOW_SCHEMA_SPEC: &str = "io.k8s.api.flowcontrol.v1.FlowSchemaSpec";

pub(crate) static FLOW_SCHEMA: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "PriorityLevel",
            "string",
            doc(
                "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationReference",
                "name",
            ),
        ),
        Column::new(
            "MatchingPrecedence",
            "string",
            doc(FLOW_SCHEMA_SPEC, "matchingPrecedence"),
        ),
        Column::new(
            "DistinguisherMethod",
            "string",
            doc(FLOW_SCHEMA_SPEC, "distinguisherMethod"),
        ),
        AGE,
        Column::new(
            "MissingPL",
            "string",
            txt("references a broken or non-existent PriorityLevelConfiguration"),
        ),
    ],
    row: |obj, now| {
        let missing = list(obj, &["status", "conditions"])
            .iter()
            .find(|c| text(c, &["type"]) == "Dangling")
            .map_or("?", |c| text(c, &["status"]));
        let method = match text(obj, &["spec", "distinguisherMethod", "type"]) {
            "" if at(obj, &["spec", "distinguisherMethod"]).is_none() => "<none>",
            t => t,
        };
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "priorityLevelConfiguration", "name"])),
            json!(int(obj, &["spec", "matchingPrecedence"])),
            json!(method),
            age(obj, now),
            json!(missing),
        ]
    },
};

/// Flow schemas are listed in the order they are matched: by precedence, then name.
pub(crate) fn flow_schema_order(a: &Value, b: &Value) -> std::cmp::Ordering {
    int(a, &["spec", "matchingPrecedence"])
        .cmp(&int(b, &["spec", "matchingPrecedence"]))
        .then_with(|| name(a).cmp(name(b)))
}

const QUEUING: &str = "io.k8s.api.flowcontrol.v1.QueuingConfiguration";

pub(crate) static PRIORITY_LEVEL: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Type",
            "string",
            doc(
                "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationSpec",
                "type",
            ),
        ),
        Column::new(
            "NominalConcurrencyShares",
            "string",
            doc(
                "io.k8s.api.flowcontrol.v1.LimitedPriorityLevelConfiguration",
                "nominalConcurrencyShares",
            ),
        ),
        Column::new("Queues", "string", doc(QUEUING, "queues")),
        Column::new("HandSize", "string", doc(QUEUING, "handSize")),
        Column::new(
            "QueueLengthLimit",
            "string",
            doc(QUEUING, "queueLengthLimit"),
        ),
        AGE,
    ],
    row: |obj, now| {
        let none = || json!("<none>");
        let (mut shares, mut queues, mut hand, mut limit) = (none(), none(), none(), none());
        if let Some(limited) = at(obj, &["spec", "limited"]) {
            shares = json!(int(limited, &["nominalConcurrencyShares"]));
            if let Some(q) = at(limited, &["limitResponse", "queuing"]) {
                queues = json!(int(q, &["queues"]));
                hand = json!(int(q, &["handSize"]));
                limit = json!(int(q, &["queueLengthLimit"]));
            }
        }
        vec![
            json!(name(obj)),
            json!(text(obj, &["spec", "type"])),
            shares,
            queues,
            hand,
            limit,
            age(obj, now),
        ]
    },
};
