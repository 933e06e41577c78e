//! Server-side printing: the `meta.k8s.io/v1` `Table` that `kubectl get` asks for
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and prints as it is.
//!
//! For each built-in kind this knows the columns Kubernetes v1.32 sends (name, type, format,
//! description, priority: priority 1 columns are the ones `-o wide` adds) and computes the cells
//! of a row from an object, as kube-apiserver's printers do. The server always computes every
//! column; kubectl drops the priority 1 ones unless asked for `-o wide`. Kinds with no printer
//! of their own get the default columns, "Name" and "Created At".
//!
//! Descriptions: printers that describe a column in their own words carry that text
//! ([`Description::Text`]); the others reuse the OpenAPI description of an API field
//! ([`Description::Field`]), which [`build_with`] resolves through [`TableOptions::describe`],
//! e.g. [`openapi_describer`] over the OpenAPI document the server publishes. Unresolved field
//! descriptions are sent as "" (kubectl never shows descriptions).

mod apps;
mod autoscaling;
mod batch;
mod cluster;
mod core;
mod core_config;
pub mod duration;
mod format;
mod networking;
mod pod;
pub mod quantity;
mod storage;

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use duration::Nanos;

/// Where a column's description comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Description {
    /// The printer's own words.
    Text(&'static str),
    /// The OpenAPI description of `property` in the schema `definition`
    /// (e.g. `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`, `name`).
    Field {
        definition: &'static str,
        property: &'static str,
    },
    /// Kubernetes sends an empty description.
    Empty,
}

/// One column of a table, as `meta.k8s.io/v1` `TableColumnDefinition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The column header as sent ("Name", "Nominated Node"); kubectl upper-cases it.
    pub name: &'static str,
    /// "string", "integer", "boolean", "number" or "date".
    pub type_: &'static str,
    /// "name" for the column identifying the object, else "".
    pub format: &'static str,
    pub description: Description,
    /// 0 for default columns, 1 for the ones only `-o wide` shows.
    pub priority: i32,
}

impl Column {
    pub const fn new(name: &'static str, type_: &'static str, description: Description) -> Self {
        Column {
            name,
            type_,
            format: "",
            description,
            priority: 0,
        }
    }

    /// This column is only shown with `-o wide`.
    pub const fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    /// This column holds the object's name.
    pub const fn name_format(mut self) -> Self {
        self.format = "name";
        self
    }

    /// The description as sent, resolving field descriptions with `describe`.
    pub fn description_text(&self, describe: Option<&Describe<'_>>) -> String {
        match self.description {
            Description::Text(t) => t.to_string(),
            Description::Field {
                definition,
                property,
            } => describe
                .and_then(|d| d(definition, property))
                .unwrap_or_default(),
            Description::Empty => String::new(),
        }
    }

    /// The `TableColumnDefinition` JSON.
    pub fn to_json(&self, describe: Option<&Describe<'_>>) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description_text(describe),
            "priority": self.priority,
        })
    }
}

/// Looks up the OpenAPI description of a property: `(definition, property) -> description`.
pub type Describe<'a> = dyn Fn(&str, &str) -> Option<String> + 'a;

/// A describer over an OpenAPI v2 (`definitions`) or v3 (`components.schemas`) document.
pub fn openapi_describer(spec: &Value) -> impl Fn(&str, &str) -> Option<String> + '_ {
    move |definition, property| {
        [&["definitions"][..], &["components", "schemas"][..]]
            .iter()
            .find_map(|root| {
                let mut path: Vec<&str> = root.to_vec();
                path.extend([definition, "properties", property, "description"]);
                format::opt_text(spec, &path).map(str::to_string)
            })
    }
}

pub(crate) const fn doc(definition: &'static str, property: &'static str) -> Description {
    Description::Field {
        definition,
        property,
    }
}

pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub(crate) const NAME: Column =
    Column::new("Name", "string", doc(OBJECT_META, "name")).name_format();
pub(crate) const AGE: Column = Column::new("Age", "string", doc(OBJECT_META, "creationTimestamp"));
pub(crate) const CONTAINERS_WIDE: Column = Column::new(
    "Containers",
    "string",
    Description::Text("Names of each container in the template."),
)
.wide();
pub(crate) const IMAGES_WIDE: Column = Column::new(
    "Images",
    "string",
    Description::Text("Images referenced by each container in the template."),
)
.wide();

/// The columns of kinds without a printer of their own.
pub const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Created At", "date", doc(OBJECT_META, "creationTimestamp")),
];

/// A kind's printer: its columns and how a row's cells are computed at a given time.
pub(crate) struct Printer {
    pub columns: &'static [Column],
    pub row: fn(&Value, Nanos) -> Vec<Value>,
}

fn printer(group: &str, kind: &str) -> Option<&'static Printer> {
    Some(match (group, kind) {
        ("", "Pod") => &pod::POD,
        ("", "PodTemplate") => &pod::POD_TEMPLATE,
        ("", "ReplicationController") => &core::REPLICATION_CONTROLLER,
        ("", "Node") => &core::NODE,
        ("", "Namespace") => &core::NAMESPACE,
        ("", "Service") => &core::SERVICE,
        ("", "Endpoints") => &core::ENDPOINTS,
        ("", "Event") | ("events.k8s.io", "Event") => &core::EVENT,
        ("", "ComponentStatus") => &core::COMPONENT_STATUS,
        ("", "ConfigMap") => &core_config::CONFIG_MAP,
        ("", "Secret") => &core_config::SECRET,
        ("", "ServiceAccount") => &core_config::SERVICE_ACCOUNT,
        ("", "PersistentVolume") => &core_config::PERSISTENT_VOLUME,
        ("", "PersistentVolumeClaim") => &core_config::PERSISTENT_VOLUME_CLAIM,
        ("", "ResourceQuota") => &core_config::RESOURCE_QUOTA,
        ("apps", "Deployment") => &apps::DEPLOYMENT,
        ("apps", "ReplicaSet") => &apps::REPLICA_SET,
        ("apps", "StatefulSet") => &apps::STATEFUL_SET,
        ("apps", "DaemonSet") => &apps::DAEMON_SET,
        ("apps", "ControllerRevision") => &apps::CONTROLLER_REVISION,
        ("batch", "Job") => &batch::JOB,
        ("batch", "CronJob") => &batch::CRON_JOB,
        ("autoscaling", "HorizontalPodAutoscaler") => &autoscaling::HORIZONTAL_POD_AUTOSCALER,
        ("autoscaling", "Scale") => &autoscaling::SCALE,
        ("networking.k8s.io", "Ingress") => &networking::INGRESS,
        ("networking.k8s.io", "IngressClass") => &networking::INGRESS_CLASS,
        ("networking.k8s.io", "NetworkPolicy") => &networking::NETWORK_POLICY,
        ("networking.k8s.io", "ServiceCIDR") => &networking::SERVICE_CIDR,
        ("networking.k8s.io", "IPAddress") => &networking::IP_ADDRESS,
        ("discovery.k8s.io", "EndpointSlice") => &networking::ENDPOINT_SLICE,
        ("storage.k8s.io", "StorageClass") => &storage::STORAGE_CLASS,
        ("storage.k8s.io", "CSIDriver") => &storage::CSI_DRIVER,
        ("storage.k8s.io", "CSINode") => &storage::CSI_NODE,
        ("storage.k8s.io", "VolumeAttachment") => &storage::VOLUME_ATTACHMENT,
        ("storage.k8s.io", "CSIStorageCapacity") => &storage::CSI_STORAGE_CAPACITY,
        ("storage.k8s.io", "VolumeAttributesClass") => &storage::VOLUME_ATTRIBUTES_CLASS,
        ("rbac.authorization.k8s.io", "RoleBinding") => &cluster::ROLE_BINDING,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => &cluster::CLUSTER_ROLE_BINDING,
        ("certificates.k8s.io", "CertificateSigningRequest") => &cluster::CSR,
        ("coordination.k8s.io", "Lease") => &cluster::LEASE,
        ("scheduling.k8s.io", "PriorityClass") => &cluster::PRIORITY_CLASS,
        ("policy", "PodDisruptionBudget") => &cluster::PDB,
        ("node.k8s.io", "RuntimeClass") => &cluster::RUNTIME_CLASS,
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration")
        | ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => &cluster::WEBHOOK,
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => &cluster::VAP,
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            &cluster::VAP_BINDING
        }
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => &cluster::FLOW_SCHEMA,
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => &cluster::PRIORITY_LEVEL,
        _ => return None,
    })
}

/// Whether the kind has a printer of its own (rather than the default "Name", "Created At").
pub fn has_printer(group: &str, kind: &str) -> bool {
    printer(group, kind).is_some()
}

/// The columns Kubernetes v1.32 sends for a kind, wide (priority 1) columns included.
pub fn columns(group: &str, kind: &str) -> &'static [Column] {
    printer(group, kind).map_or(DEFAULT_COLUMNS, |p| p.columns)
}

/// The cells of an object's row at time `now`, one per column of [`columns`].
pub fn row(group: &str, kind: &str, obj: &Value, now: SystemTime) -> Vec<Value> {
    let now = duration::system_nanos(now);
    match printer(group, kind) {
        Some(p) => (p.row)(obj, now),
        None => vec![
            json!(format::name(obj)),
            json!(duration::rfc3339_utc(format::at(
                obj,
                &["metadata", "creationTimestamp"]
            ))),
        ],
    }
}

/// The row conditions (`TableRowCondition`) Kubernetes attaches to an object's row: a
/// "Completed" condition for pods that succeeded or failed, nothing otherwise.
pub fn row_conditions(group: &str, kind: &str, obj: &Value) -> Vec<Value> {
    match (group, kind) {
        ("", "Pod") => pod::conditions(obj),
        _ => Vec::new(),
    }
}

/// What each row carries besides its cells (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object: `"object": null`.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parse the `includeObject` query parameter ("" means the default, `Metadata`). The error
    /// is the message of the 400 BadRequest kube-apiserver answers with.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {}: \
                 must be 'Metadata', 'Object', 'None', or empty",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
    }
}

/// The table's list metadata: for a list, the list's; for a single object (a get, or a watch
/// event), its resourceVersion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMeta {
    pub resource_version: Option<String>,
    pub continue_: Option<String>,
    pub remaining_item_count: Option<i64>,
}

impl ListMeta {
    /// The list metadata kube-apiserver gives the table of a single object.
    pub fn of_object(obj: &Value) -> Self {
        ListMeta {
            resource_version: format::opt_text(obj, &["metadata", "resourceVersion"])
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            ..Default::default()
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(rv) = self.resource_version.as_ref().filter(|s| !s.is_empty()) {
            m.insert("resourceVersion".into(), json!(rv));
        }
        if let Some(c) = self.continue_.as_ref().filter(|s| !s.is_empty()) {
            m.insert("continue".into(), json!(c));
        }
        if let Some(n) = self.remaining_item_count {
            m.insert("remainingItemCount".into(), json!(n));
        }
        Value::Object(m)
    }
}

/// Everything about a table request beyond the objects.
#[derive(Default)]
pub struct TableOptions<'a> {
    pub include_object: IncludeObject,
    /// `noHeaders`: omit the column definitions (`"columnDefinitions": null`), as in every
    /// watch event after the first.
    pub no_headers: bool,
    pub list_meta: ListMeta,
    /// The `meta.k8s.io` version asked for ("v1" when empty; kubectl may ask for "v1beta1").
    pub meta_version: &'a str,
    /// The apiVersion to give rows' objects that lack one with `IncludeObject::Object`
    /// (the catalogue's first version of the kind when `None`).
    pub api_version: Option<&'a str>,
    /// Resolves [`Description::Field`] descriptions.
    pub describe: Option<&'a Describe<'a>>,
}

/// The full `Table` for `objects` with the default options and the given `includeObject`.
pub fn build(
    group: &str,
    kind: &str,
    objects: &[&Value],
    include_object: IncludeObject,
    now: SystemTime,
) -> Value {
    let opts = TableOptions {
        include_object,
        ..Default::default()
    };
    build_with(group, kind, objects, &opts, now)
}

fn api_version_of(group: &str, kind: &str) -> String {
    crate::catalogue::RESOURCES
        .iter()
        .find(|r| r.group == group && r.kind == kind)
        .map(|r| r.api_version())
        .unwrap_or_else(|| "v1".into())
}

/// The full `meta.k8s.io` `Table` for `objects`, as kube-apiserver sends it.
pub fn build_with(
    group: &str,
    kind: &str,
    objects: &[&Value],
    opts: &TableOptions<'_>,
    now: SystemTime,
) -> Value {
    let meta_version = if opts.meta_version.is_empty() {
        "v1"
    } else {
        opts.meta_version
    };
    let meta_api_version = format!("meta.k8s.io/{meta_version}");
    let printer = printer(group, kind);
    let column_definitions = if opts.no_headers {
        Value::Null
    } else {
        Value::Array(
            columns(group, kind)
                .iter()
                .map(|c| c.to_json(opts.describe))
                .collect(),
        )
    };
    let mut objects: Vec<&Value> = objects.to_vec();
    if (group, kind) == ("flowcontrol.apiserver.k8s.io", "FlowSchema") {
        objects.sort_by(|a, b| cluster::flow_schema_order(a, b));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut r = Map::new();
            r.insert("cells".into(), Value::Array(row(group, kind, obj, now)));
            let conditions = row_conditions(group, kind, obj);
            if !conditions.is_empty() {
                r.insert("conditions".into(), Value::Array(conditions));
            }
            let object = match opts.include_object {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": meta_api_version,
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
                IncludeObject::Object => full_object(obj, group, kind, opts),
            };
            r.insert("object".into(), object);
            Value::Object(r)
        })
        .collect();
    // Printers build an empty list of rows; the default convertor leaves it unset.
    let rows = if rows.is_empty() && printer.is_none() {
        Value::Null
    } else {
        Value::Array(rows)
    };
    json!({
        "kind": "Table",
        "apiVersion": meta_api_version,
        "metadata": opts.list_meta.to_json(),
        "columnDefinitions": column_definitions,
        "rows": rows,
    })
}

fn full_object(obj: &Value, group: &str, kind: &str, opts: &TableOptions<'_>) -> Value {
    let mut full = (*obj).clone();
    if let Value::Object(m) = &mut full {
        if !m.contains_key("apiVersion") {
            let v = opts
                .api_version
                .map(str::to_string)
                .unwrap_or_else(|| api_version_of(group, kind));
            m.insert("apiVersion".into(), json!(v));
        }
        if !m.contains_key("kind") {
            m.insert("kind".into(), json!(kind));
        }
    }
    full
}

#[cfg(test)]
mod tests;
