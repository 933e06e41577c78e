//! The built-in kinds' schemas, generated at run time (once) from the k8s-openapi crate's
//! `schemars` implementations, plus a list kind for each listable kind.

use std::borrow::Cow;
use std::sync::OnceLock;

use k8s_openapi::schemars::{self, JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::build::Builder;
use super::{SchemaId, Schemas, Type};

#[path = "list_types.rs"]
mod list_types;

/// One kind Kubernetes v1.32 serves (GA), mapped to its k8s-openapi type.
pub(crate) struct KindType {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// Whether `<Kind>List` exists.
    pub list: bool,
    name: fn() -> Cow<'static, str>,
    generate: fn(&mut SchemaGenerator) -> schemars::Schema,
}

macro_rules! kinds {
    ($( $group:literal $version:literal $kind:literal $list:literal => $ty:ty ;)*) => {
        &[$(
            KindType {
                group: $group,
                version: $version,
                kind: $kind,
                list: $list,
                name: <$ty as JsonSchema>::schema_name,
                generate: |g: &mut SchemaGenerator| g.subschema_for::<$ty>(),
            },
        )*]
    };
}

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions_v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta_v1;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration_v1;

/// Every GA kind of Kubernetes v1.32 (more than the catalogue serves today, so a resource added
/// there finds its schema), the subresource kinds, and the meta/v1 kinds requests carry.
pub(crate) static KIND_TYPES: &[KindType] = kinds! {
    "" "v1" "Binding" false => api::core::v1::Binding;
    "" "v1" "ComponentStatus" true => api::core::v1::ComponentStatus;
    "" "v1" "ConfigMap" true => api::core::v1::ConfigMap;
    "" "v1" "Endpoints" true => api::core::v1::Endpoints;
    "" "v1" "Event" true => api::core::v1::Event;
    "" "v1" "LimitRange" true => api::core::v1::LimitRange;
    "" "v1" "Namespace" true => api::core::v1::Namespace;
    "" "v1" "Node" true => api::core::v1::Node;
    "" "v1" "PersistentVolumeClaim" true => api::core::v1::PersistentVolumeClaim;
    "" "v1" "PersistentVolume" true => api::core::v1::PersistentVolume;
    "" "v1" "Pod" true => api::core::v1::Pod;
    "" "v1" "PodTemplate" true => api::core::v1::PodTemplate;
    "" "v1" "ReplicationController" true => api::core::v1::ReplicationController;
    "" "v1" "ResourceQuota" true => api::core::v1::ResourceQuota;
    "" "v1" "Secret" true => api::core::v1::Secret;
    "" "v1" "ServiceAccount" true => api::core::v1::ServiceAccount;
    "" "v1" "Service" true => api::core::v1::Service;
    "" "v1" "DeleteOptions" false => meta_v1::DeleteOptions;
    "" "v1" "Status" false => meta_v1::Status;
    "" "v1" "WatchEvent" false => meta_v1::WatchEvent<Value>;
    "" "v1" "APIResourceList" false => meta_v1::APIResourceList;
    "" "v1" "APIGroupList" false => meta_v1::APIGroupList;
    "" "v1" "APIGroup" false => meta_v1::APIGroup;
    "" "v1" "APIVersions" false => meta_v1::APIVersions;
    "admissionregistration.k8s.io" "v1" "MutatingWebhookConfiguration" true => api::admissionregistration::v1::MutatingWebhookConfiguration;
    "admissionregistration.k8s.io" "v1" "ValidatingWebhookConfiguration" true => api::admissionregistration::v1::ValidatingWebhookConfiguration;
    "admissionregistration.k8s.io" "v1" "ValidatingAdmissionPolicy" true => api::admissionregistration::v1::ValidatingAdmissionPolicy;
    "admissionregistration.k8s.io" "v1" "ValidatingAdmissionPolicyBinding" true => api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
    "apiextensions.k8s.io" "v1" "CustomResourceDefinition" true => apiextensions_v1::CustomResourceDefinition;
    "apiregistration.k8s.io" "v1" "APIService" true => apiregistration_v1::APIService;
    "apps" "v1" "ControllerRevision" true => api::apps::v1::ControllerRevision;
    "apps" "v1" "DaemonSet" true => api::apps::v1::DaemonSet;
    "apps" "v1" "Deployment" true => api::apps::v1::Deployment;
    "apps" "v1" "ReplicaSet" true => api::apps::v1::ReplicaSet;
    "apps" "v1" "StatefulSet" true => api::apps::v1::StatefulSet;
    "authentication.k8s.io" "v1" "SelfSubjectReview" false => api::authentication::v1::SelfSubjectReview;
    "authentication.k8s.io" "v1" "TokenRequest" false => api::authentication::v1::TokenRequest;
    "authentication.k8s.io" "v1" "TokenReview" false => api::authentication::v1::TokenReview;
    "authorization.k8s.io" "v1" "LocalSubjectAccessReview" false => api::authorization::v1::LocalSubjectAccessReview;
    "authorization.k8s.io" "v1" "SelfSubjectAccessReview" false => api::authorization::v1::SelfSubjectAccessReview;
    "authorization.k8s.io" "v1" "SelfSubjectRulesReview" false => api::authorization::v1::SelfSubjectRulesReview;
    "authorization.k8s.io" "v1" "SubjectAccessReview" false => api::authorization::v1::SubjectAccessReview;
    "autoscaling" "v1" "HorizontalPodAutoscaler" true => api::autoscaling::v1::HorizontalPodAutoscaler;
    "autoscaling" "v1" "Scale" false => api::autoscaling::v1::Scale;
    "autoscaling" "v2" "HorizontalPodAutoscaler" true => api::autoscaling::v2::HorizontalPodAutoscaler;
    "batch" "v1" "CronJob" true => api::batch::v1::CronJob;
    "batch" "v1" "Job" true => api::batch::v1::Job;
    "certificates.k8s.io" "v1" "CertificateSigningRequest" true => api::certificates::v1::CertificateSigningRequest;
    "coordination.k8s.io" "v1" "Lease" true => api::coordination::v1::Lease;
    "discovery.k8s.io" "v1" "EndpointSlice" true => api::discovery::v1::EndpointSlice;
    "events.k8s.io" "v1" "Event" true => api::events::v1::Event;
    "flowcontrol.apiserver.k8s.io" "v1" "FlowSchema" true => api::flowcontrol::v1::FlowSchema;
    "flowcontrol.apiserver.k8s.io" "v1" "PriorityLevelConfiguration" true => api::flowcontrol::v1::PriorityLevelConfiguration;
    "networking.k8s.io" "v1" "Ingress" true => api::networking::v1::Ingress;
    "networking.k8s.io" "v1" "IngressClass" true => api::networking::v1::IngressClass;
    "networking.k8s.io" "v1" "NetworkPolicy" true => api::networking::v1::NetworkPolicy;
    "node.k8s.io" "v1" "RuntimeClass" true => api::node::v1::RuntimeClass;
    "policy" "v1" "Eviction" false => api::policy::v1::Eviction;
    "policy" "v1" "PodDisruptionBudget" true => api::policy::v1::PodDisruptionBudget;
    "rbac.authorization.k8s.io" "v1" "ClusterRole" true => api::rbac::v1::ClusterRole;
    "rbac.authorization.k8s.io" "v1" "ClusterRoleBinding" true => api::rbac::v1::ClusterRoleBinding;
    "rbac.authorization.k8s.io" "v1" "Role" true => api::rbac::v1::Role;
    "rbac.authorization.k8s.io" "v1" "RoleBinding" true => api::rbac::v1::RoleBinding;
    "scheduling.k8s.io" "v1" "PriorityClass" true => api::scheduling::v1::PriorityClass;
    "storage.k8s.io" "v1" "CSIDriver" true => api::storage::v1::CSIDriver;
    "storage.k8s.io" "v1" "CSINode" true => api::storage::v1::CSINode;
    "storage.k8s.io" "v1" "CSIStorageCapacity" true => api::storage::v1::CSIStorageCapacity;
    "storage.k8s.io" "v1" "StorageClass" true => api::storage::v1::StorageClass;
    "storage.k8s.io" "v1" "VolumeAttachment" true => api::storage::v1::VolumeAttachment;
};

/// Definitions the OpenAPI documents need beyond the kinds.
static EXTRA_TYPES: &[KindType] = kinds! {
    "" "" "Patch" false => meta_v1::Patch;
    "" "" "Info" false => k8s_openapi::apimachinery::pkg::version::Info;
};

/// One registered kind and the definitions behind it.
#[derive(Debug, Clone)]
pub(crate) struct BuiltinKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub definition: String,
    /// `(list kind, list definition)`.
    pub list: Option<(String, String)>,
}

/// Every built-in definition as JSON Schema (refs written `#/$defs/<name>`), with the kinds.
#[derive(Debug)]
pub(crate) struct BuiltinDefinitions {
    pub definitions: Map<String, Value>,
    pub kinds: Vec<BuiltinKind>,
}

impl BuiltinDefinitions {
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<&BuiltinKind> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.kind == kind)
    }
}

pub(crate) const REF_PREFIX: &str = "#/$defs/";
pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// The definitions, generated once.
pub(crate) fn builtin_definitions() -> &'static BuiltinDefinitions {
    static DEFS: OnceLock<BuiltinDefinitions> = OnceLock::new();
    DEFS.get_or_init(generate)
}

fn generate() -> BuiltinDefinitions {
    let mut gen = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut kinds = Vec::with_capacity(KIND_TYPES.len());
    for t in KIND_TYPES.iter().chain(EXTRA_TYPES) {
        (t.generate)(&mut gen);
    }
    // ListMeta is reachable from every list kind.
    gen.subschema_for::<meta_v1::ListMeta>();
    let mut definitions = gen.take_definitions(false);
    for t in KIND_TYPES {
        let definition = (t.name)().into_owned();
        let list = t.list.then(|| {
            let list_kind = format!("{}List", t.kind);
            let list_def = format!("{definition}List");
            let schema = list_schema(&definitions, t.kind, &definition, &list_kind);
            definitions.insert(list_def.clone(), schema);
            (list_kind, list_def)
        });
        kinds.push(BuiltinKind {
            group: t.group,
            version: t.version,
            kind: t.kind,
            definition,
            list,
        });
    }
    BuiltinDefinitions { definitions, kinds }
}

/// `<Kind>List`: apiVersion, kind, metadata (ListMeta) and items. The apiVersion and kind
/// property schemas are the item kind's own.
fn list_schema(defs: &Map<String, Value>, kind: &str, item_def: &str, list_kind: &str) -> Value {
    let item_props = defs
        .get(item_def)
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object);
    let prop = |name: &str| {
        item_props
            .and_then(|p| p.get(name))
            .cloned()
            .unwrap_or_else(|| json!({"type": "string"}))
    };
    let list_meta_description = defs
        .get(LIST_META)
        .and_then(|d| d.get("description"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut metadata = json!({ "$ref": format!("{REF_PREFIX}{LIST_META}") });
    if !list_meta_description.is_null() {
        metadata["description"] = list_meta_description;
    }
    json!({
        "description": format!("{list_kind} is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": prop("apiVersion"),
            "items": {
                "description": format!("The {kind} objects of the list."),
                "type": "array",
                "items": { "$ref": format!("{REF_PREFIX}{item_def}") },
            },
            "kind": prop("kind"),
            "metadata": metadata,
        },
        "required": ["items"],
    })
}

pub(super) fn build_schemas() -> Schemas {
    let defs = builtin_definitions();
    let mut b = Builder::new(true);
    b.definitions(defs.definitions.iter().map(|(k, v)| (k.as_str(), v)))
        .expect("the built-in definitions are consistent");
    let mut schemas = b.finish(None);
    apply_list_facts(&mut schemas);
    for k in &defs.kinds {
        schemas
            .add_kind(k.group, k.version, k.kind, &k.definition)
            .expect("kind definitions exist");
        if let Some((list_kind, list_def)) = &k.list {
            schemas
                .add_kind(k.group, k.version, list_kind, list_def)
                .expect("list definitions exist");
        }
    }
    schemas
}

/// The node of `definition`'s property `field`, when both exist.
fn field_node(schemas: &Schemas, definition: &str, field: &str) -> Option<SchemaId> {
    let def = *schemas.definitions.get(definition)?;
    schemas.nodes[def as usize].properties.get(field)
}

/// Give the built-in nodes the list and map semantics of Kubernetes' own OpenAPI documents
/// (`list_types`), so server-side apply reads them as it reads a CRD's schema.
fn apply_list_facts(schemas: &mut Schemas) {
    for &(definition, field, list_type, keys) in list_types::LIST_TYPES {
        let Some(id) = field_node(schemas, definition, field) else {
            continue;
        };
        let node = &mut schemas.nodes[id as usize];
        if node.ty == Some(Type::Array) || node.items.is_some() {
            node.list_type = Some(list_type.into());
            node.list_map_keys = keys.iter().map(|k| Box::from(*k)).collect();
        }
    }
    for &(definition, field, map_type) in list_types::MAP_TYPES {
        if field.is_empty() {
            if let Some(&id) = schemas.definitions.get(definition) {
                schemas.nodes[id as usize].map_type = Some(map_type.into());
            }
        } else if let Some(id) = own_field_node(schemas, definition, field) {
            schemas.nodes[id as usize].map_type = Some(map_type.into());
        }
    }
    for &(definition, field, default) in list_types::KEY_DEFAULTS {
        let Some(id) = field_node(schemas, definition, field) else {
            continue;
        };
        let node = &mut schemas.nodes[id as usize];
        if node.name.is_none() && node.default.is_none() {
            node.default = Some(match default {
                list_types::KeyDefault::Str(s) => Value::String(s.into()),
                list_types::KeyDefault::Int(i) => Value::from(i),
            });
        }
    }
}

/// The node of a property, copied first when it is a shared named definition, so that facts
/// about this one field (PersistentVolumeSpec's granular `claimRef`, whose ObjectReference is
/// atomic elsewhere) do not leak to every other use of the definition.
fn own_field_node(schemas: &mut Schemas, definition: &str, field: &str) -> Option<SchemaId> {
    let def = *schemas.definitions.get(definition)?;
    let id = schemas.nodes[def as usize].properties.get(field)?;
    if schemas.nodes[id as usize].name.is_none() {
        return Some(id);
    }
    let copy = schemas.nodes[id as usize].clone();
    let new_id = schemas.nodes.len() as SchemaId;
    schemas.nodes.push(copy);
    let props = &mut schemas.nodes[def as usize].properties;
    for entry in props.entries.iter_mut() {
        if &*entry.0 == field {
            entry.1 = new_id;
        }
    }
    Some(new_id)
}

#[cfg(test)]
mod list_fact_tests {
    use super::super::{SchemaRef, Schemas};

    fn at(group: &str, version: &str, kind: &str, path: &str) -> SchemaRef<'static> {
        let root = Schemas::builtin()
            .for_kind(group, version, kind)
            .unwrap_or_else(|| panic!("no schema for {kind}"));
        root.lookup(path)
            .unwrap_or_else(|| panic!("{kind} has no {path}"))
    }

    fn list(s: SchemaRef<'_>) -> (Option<&str>, Vec<&str>) {
        let node = s.schema();
        (
            node.list_type.as_deref(),
            node.list_map_keys.iter().map(|k| &**k).collect(),
        )
    }

    #[test]
    fn pod_containers_are_a_map_keyed_by_name() {
        let containers = at("", "v1", "Pod", "spec.containers");
        assert_eq!(list(containers), (Some("map"), vec!["name"]));
        let init = at("", "v1", "Pod", "spec.initContainers");
        assert_eq!(list(init), (Some("map"), vec!["name"]));
        let env = at(
            "apps",
            "v1",
            "Deployment",
            "spec.template.spec.containers.env",
        );
        assert_eq!(list(env), (Some("map"), vec!["name"]));
    }

    #[test]
    fn container_ports_are_keyed_by_port_and_protocol_with_tcp_default() {
        let ports = at("", "v1", "Pod", "spec.containers.ports");
        assert_eq!(
            list(ports),
            (Some("map"), vec!["containerPort", "protocol"])
        );
        let protocol = at("", "v1", "Pod", "spec.containers.ports.protocol");
        assert_eq!(protocol.schema().default, Some(serde_json::json!("TCP")));
        let service = at("", "v1", "Service", "spec.ports");
        assert_eq!(list(service), (Some("map"), vec!["port", "protocol"]));
    }

    #[test]
    fn metadata_lists_are_a_set_and_a_map_by_uid() {
        let finalizers = at("", "v1", "ConfigMap", "metadata.finalizers");
        assert_eq!(list(finalizers), (Some("set"), vec![]));
        let owners = at("apps", "v1", "ReplicaSet", "metadata.ownerReferences");
        assert_eq!(list(owners), (Some("map"), vec!["uid"]));
        let owner = at("apps", "v1", "ReplicaSet", "metadata.ownerReferences");
        let item = owner.items().map(|i| i.schema().map_type.as_deref());
        assert_eq!(item, Some(Some("atomic")));
    }

    #[test]
    fn atomic_lists_and_maps() {
        let tolerations = at("", "v1", "Pod", "spec.tolerations");
        assert_eq!(list(tolerations), (Some("atomic"), vec![]));
        let selector = at("apps", "v1", "Deployment", "spec.selector");
        assert_eq!(selector.schema().map_type.as_deref(), Some("atomic"));
        let exprs = at("apps", "v1", "Deployment", "spec.selector.matchExpressions");
        assert_eq!(list(exprs), (Some("atomic"), vec![]));
        let node_selector = at("", "v1", "Pod", "spec.nodeSelector");
        assert_eq!(node_selector.schema().map_type.as_deref(), Some("atomic"));
        // Lists Kubernetes leaves unmarked stay atomic by default (no list type at all).
        let args = at("", "v1", "Pod", "spec.containers.args");
        assert_eq!(list(args), (Some("atomic"), vec![]));
    }

    #[test]
    fn a_field_level_map_type_does_not_leak_into_its_definition() {
        let claim_ref = at("", "v1", "PersistentVolume", "spec.claimRef");
        assert_eq!(claim_ref.schema().map_type.as_deref(), Some("granular"));
        assert_eq!(claim_ref.name(), Some("io.k8s.api.core.v1.ObjectReference"));
        let involved = at("", "v1", "Event", "involvedObject");
        assert_eq!(involved.schema().map_type.as_deref(), Some("atomic"));
        assert_ne!(claim_ref.id(), involved.id());
    }
}
