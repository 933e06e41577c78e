//! Per-kind policy for the generic registry (Kubernetes' `RESTCreateStrategy`,
//! `RESTUpdateStrategy` ...): small and stateless, with defaults that suit most kinds.

use capstan_api::catalogue::ResourceInfo;
use serde_json::{json, Value};

use crate::error::{ApiResult, FieldError};
use capstan_api::meta::At as _;

/// What is special about one kind. Every method has a default that fits most kinds.
pub trait Strategy: Send + Sync {
    fn info(&self) -> &'static ResourceInfo;

    /// New objects start at `metadata.generation` 1 and spec changes bump it (workload kinds
    /// do; ConfigMaps, HorizontalPodAutoscalers and StorageClasses do not).
    fn tracks_generation(&self) -> bool {
        matches!(
            self.info().kind,
            "Deployment"
                | "ReplicaSet"
                | "StatefulSet"
                | "DaemonSet"
                | "Job"
                | "CronJob"
                | "ReplicationController"
                | "PodTemplate"
                | "PodDisruptionBudget"
                | "Ingress"
                | "IngressClass"
                | "NetworkPolicy"
                | "EndpointSlice"
                | "PriorityClass"
        )
    }

    /// Whether an update changes what `metadata.generation` counts.
    fn generation_changes(&self, old: &Value, new: &Value) -> bool {
        match self.info().kind {
            "PodTemplate" => old.get("template") != new.get("template"),
            // Everything but the metadata, and the labels too.
            "EndpointSlice" => {
                let content = |v: &Value| -> Value {
                    let mut v = v.clone();
                    if let Some(m) = v.as_object_mut() {
                        let labels = m.get("metadata").and_then(|md| md.get("labels")).cloned();
                        m.insert("metadata".into(), json!({"labels": labels}));
                    }
                    v
                };
                content(old) != content(new)
            }
            // A PriorityClass has no spec: it stays at generation 1.
            _ => old.get("spec") != new.get("spec"),
        }
    }

    /// The kind has a status subresource: writes to the main resource keep the stored
    /// status, and writes to `status` change nothing else.
    fn has_status(&self) -> bool {
        self.info().has_subresource("status")
    }

    /// Clear or default fields before a create (e.g. reset status).
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.has_status() && !matches!(self.info().kind, "Node" | "Namespace") {
            if let Some(map) = obj.as_object_mut() {
                map.remove("status");
            }
        }
        initial_status(self.info().kind, obj);
    }

    /// Adjust an update of the main resource given the stored object.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.has_status() {
            copy_field(new, old, "status");
        }
    }

    /// Check a new object (Kubernetes' validation for the kind, names included).
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let i = self.info();
        capstan_api::validation::validate(i.group, i.kind, obj)
    }

    /// Check an update (immutable fields etc.).
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let i = self.info();
        capstan_api::validation::validate_update(i.group, i.kind, new, old)
    }

    /// Check a write to the `status` subresource.
    fn validate_status_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let i = self.info();
        capstan_api::validation::validate_subresource_update(i.group, i.kind, "status", new, old)
    }

    /// Check a write to a CertificateSigningRequest's `approval` subresource.
    fn validate_approval_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let i = self.info();
        capstan_api::validation::validate_subresource_update(i.group, i.kind, "approval", new, old)
    }

    /// Take what the object needs from shared pools (cluster IPs, node ports); `old` on update.
    fn allocate(&self, _obj: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }

    /// Give back what `obj` held (after a delete, a failed create or a dry run).
    fn release(&self, _obj: &Value) {}

    /// A PUT of a missing object creates it.
    fn allow_create_on_update(&self) -> bool {
        matches!(self.info().kind, "Lease" | "Endpoints" | "Event")
    }

    /// Defaults beyond the built-in ones (a custom resource's schema defaults), applied
    /// wherever the registry defaults an object.
    fn extra_defaults(&self, _obj: &mut Value) {}

    /// Field validation against a schema other than the built-in one: `Some((type errors,
    /// unknown field paths))` after pruning the unknown fields; `None` to use the built-in
    /// schema of the kind.
    fn check_fields(&self, _obj: &mut Value) -> Option<(Vec<String>, Vec<String>)> {
        None
    }

    /// A Table of `objects` (storage form) when this kind prints differently from the
    /// built-in printers (custom resources' additionalPrinterColumns).
    fn table(
        &self,
        _objects: &[&Value],
        _include: capstan_api::table::IncludeObject,
        _list_meta: &Value,
    ) -> Option<Value> {
        None
    }

    /// The schema managed fields are tracked and apply merges by (`None`: the built-in
    /// kind's).
    fn schema(&self) -> Option<capstan_api::schema::SchemaRef<'_>> {
        None
    }

    /// Where a custom resource's Scale reads and writes (`None`: `spec.replicas`,
    /// `status.replicas` and `spec.selector`, as the built-in workloads).
    fn scale_paths(&self) -> Option<crate::scale::ScalePaths> {
        None
    }

    /// Creates are refused with this error (a custom resource whose definition is being
    /// deleted).
    fn refuse_create(&self) -> Option<crate::error::ApiError> {
        None
    }
}

/// Statuses Kubernetes fills in on create.
fn initial_status(kind: &str, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    match kind {
        "Pod" => {
            let qos = qos_class(map.get("spec"));
            map.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": qos}),
            );
        }
        "Namespace" => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        "PersistentVolume" => {
            let now = capstan_api::meta::format_time(std::time::SystemTime::now());
            map.insert(
                "status".into(),
                json!({"phase": "Pending", "lastPhaseTransitionTime": now}),
            );
        }
        "PersistentVolumeClaim" => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        _ => {}
    }
}

/// What Kubernetes' status strategies add to a status update (`new` already carries the
/// stored object with the new status): a PersistentVolume stamps `lastPhaseTransitionTime`
/// when its phase changes, and keeps the old stamp otherwise; a DaemonSet keeps its stored
/// template generation annotation.
pub fn prepare_for_status_update(kind: &str, new: &mut Value, old: &Value) {
    if kind == "DaemonSet" {
        capstan_api::defaults::prepare_for_status_update("apps", kind, new, old);
        return;
    }
    if kind != "PersistentVolume" {
        return;
    }
    let old_phase = old.at("/status/phase").cloned();
    let old_time = old.at("/status/lastPhaseTransitionTime").cloned();
    let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    let new_time = status
        .get("lastPhaseTransitionTime")
        .filter(|t| !t.is_null())
        .cloned();
    if status.get("phase") == old_phase.as_ref() {
        if new_time.is_none() {
            if let Some(t) = old_time {
                status.insert("lastPhaseTransitionTime".into(), t);
            }
        }
    } else if new_time.is_none() || new_time == old_time {
        let now = capstan_api::meta::format_time(std::time::SystemTime::now());
        status.insert("lastPhaseTransitionTime".into(), json!(now));
    }
}

/// Set `new.field` to `old.field` (removing it when old has none).
pub fn copy_field(new: &mut Value, old: &Value, field: &str) {
    let Some(map) = new.as_object_mut() else {
        return;
    };
    match old.get(field) {
        Some(v) => {
            map.insert(field.to_string(), v.clone());
        }
        None => {
            map.remove(field);
        }
    }
}

/// The strategy every built-in kind uses until it has its own.
pub struct DefaultStrategy(pub &'static ResourceInfo);

impl Strategy for DefaultStrategy {
    fn info(&self) -> &'static ResourceInfo {
        self.0
    }
}

/// A pod's QoS class from its containers' requests and limits (Kubernetes' `GetPodQOS`).
fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec?.get(f)?.as_array())
        .flatten();
    let mut any = false;
    let mut guaranteed = true;
    let mut count = 0;
    for c in containers {
        count += 1;
        let get = |what: &str, res: &str| {
            c.get("resources")
                .and_then(|r| r.get(what))
                .and_then(|m| m.get(res))
        };
        for res in ["cpu", "memory"] {
            let (req, lim) = (get("requests", res), get("limits", res));
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed && count > 0 {
        "Guaranteed"
    } else {
        "Burstable"
    }
}
